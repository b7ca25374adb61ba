"""JSON Schemas as llama.cpp reads them for constrained output.

An object schema that lists its properties and says nothing of others is closed: a client that
sends {"name": string, "year": integer} means those two fields, and llama.cpp's converter
allows no others. Read by the JSON Schema standard it is open, and a small model then invents
extra fields (one repeated an array item for six minutes).
"""

from __future__ import annotations

from typing import Any

# Keywords whose value is one schema, or a list of schemas.
_SCHEMA = ("items", "additionalItems", "contains", "not", "if", "then", "else")
_SCHEMAS = ("anyOf", "oneOf", "prefixItems")
# Keywords whose value maps names to schemas.
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def closed(schema: Any) -> Any:
    """`schema` with every object that lists properties and says nothing of others closed
    (additionalProperties false). An allOf and its parts stay open: closed, each would refuse
    the properties the others add."""
    return _closed(schema, close=True)


def _closed(schema: Any, close: bool) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SCHEMA:
        if isinstance(out.get(key), dict):
            out[key] = _closed(out[key], True)
    for key in _SCHEMAS:
        if isinstance(out.get(key), list):
            out[key] = [_closed(part, True) for part in out[key]]
    if isinstance(out.get("allOf"), list):
        out["allOf"] = [_closed(part, False) for part in out["allOf"]]
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _closed(out["additionalProperties"], True)
    for key in _NAMED:
        if isinstance(out.get(key), dict):
            out[key] = {name: _closed(part, True) for name, part in out[key].items()}
    if close and "properties" in out and not {"additionalProperties", "allOf"} & out.keys():
        out["additionalProperties"] = False
    return out
