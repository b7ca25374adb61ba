"""What the bench tests share: a small JSON Schema validator (the subset bench_schema.json
uses; no jsonschema dependency), as the `validate` fixture."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _is_type(value, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def validate_schema(value, schema: dict, root: dict | None = None, path: str = "$") -> list[str]:
    """Every violation as 'path: what'; an empty list when `value` conforms."""
    root = root or schema
    errors: list[str] = []
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return validate_schema(value, root["$defs"][name], root, path)
    if "anyOf" in schema:
        if all(validate_schema(value, option, root, path) for option in schema["anyOf"]):
            errors.append(f"{path}: matches none of anyOf")
        return errors
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, t) for t in types):
            return [*errors, f"{path}: {type(value).__name__} is not {types}"]
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > {schema['maximum']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing {key!r}")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if "propertyNames" in schema:
                pattern = schema["propertyNames"]["pattern"]
                if not re.search(pattern, key):
                    errors.append(f"{path}: key {key!r} does not match {pattern}")
            if key in properties:
                errors += validate_schema(item, properties[key], root, f"{path}.{key}")
            elif extra is False:
                errors.append(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                errors += validate_schema(item, extra, root, f"{path}.{key}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{path}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                errors += validate_schema(item, schema["items"], root, f"{path}[{i}]")
    return errors


@pytest.fixture
def validate() -> Callable[..., list[str]]:
    return validate_schema
