"""A JSON request read field by field, and the error a client gets when a field is wrong.

Every mistake a client can make is an ApiError: its HTTP status, a message that names the
parameter, and a code; each wire format writes it in its own envelope (OpenAI's
{"error": {...}}, Anthropic's {"type": "error", "error": {...}}). A parameter specllama cannot
honour is refused by name, never ignored: only its "off" value (null, false, 0, empty, n = 1)
is accepted, as clients often send those. A field sent as null is as if it were absent, as the
SDKs send what their caller left unset.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

Neutral = dict[str, Callable[[object], bool]]  # a parameter -> whether a value of it is "off"
# How deep a body's arrays and objects may nest. Python's own JSON reader stops near 1000 levels
# with a RecursionError, and what reads a body afterwards (schemas, templates) recurses too;
# real requests nest a few dozen levels at most (OpenAI allows JSON Schemas 10 levels deep).
MAX_DEPTH = 128


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return "server_error" if self.status >= 500 else "invalid_request_error"

    def body(self) -> dict[str, Any]:
        """OpenAI's envelope, which every API but Anthropic's uses."""
        error = {"message": self.message, "type": self.type, "param": self.param}
        return {"error": {**error, "code": self.code}}


def unsupported(param: str, what: str) -> ApiError:
    return ApiError(
        400, f"{what} is not supported by specllama", param=param, code="unsupported_parameter"
    )


def off(value: object) -> bool:
    """What a client sends for a feature it does not use."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value == 0
    return value is None or value in ("", [], {})


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(
            400,
            f"We could not parse the JSON body of your request: {exc}",
            code="invalid_json",
        ) from None
    except RecursionError:
        raise _too_deep() from None
    if _depth(body) > MAX_DEPTH:
        raise _too_deep()
    return Fields(body).object


def _too_deep() -> ApiError:
    return ApiError(
        400,
        f"The JSON body of your request nests arrays and objects more than {MAX_DEPTH} levels "
        "deep.",
        code="invalid_json",
    )


def _depth(value: object) -> int:
    """How deep arrays and objects nest in `value` (a scalar: 0), without recursion."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_DEPTH:  # deeper is refused anyway: no need to walk on
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return deepest


class Fields:
    """One JSON object's fields, read by type; each error names its parameter."""

    def __init__(self, value: object, where: str = "", neutral: Neutral | None = None) -> None:
        if not isinstance(value, dict):
            name = f"'{where}'" if where else "The request body"
            raise ApiError(
                400, f"{name} must be a JSON object", param=where or None, code="invalid_type"
            )
        self.object: dict[str, Any] = value
        self._where = where
        self.read: set[str] = set()
        self._neutral = neutral or {}

    def child(self, name: str, where: str | None = None) -> Fields:
        """The object in field `name` (required), to read in its turn."""
        value = self.get(name, dict, "an object", required=True)
        return Fields(value, where or self._path(name))

    def _path(self, name: str) -> str:
        return f"{self._where}.{name}" if self._where else name

    def refuse_unread(self) -> None:
        """Refuse every field not read, except the API's parameters at their off value."""
        for name, value in self.object.items():
            if name in self.read or value is None:  # null: as if it were not sent
                continue
            if name in self._neutral:
                if self._neutral[name](value):
                    continue
                raise unsupported(self._path(name), f"'{name}' = {json.dumps(value)}")
            raise ApiError(
                400,
                f"Unrecognized request argument supplied: {self._path(name)}",
                param=self._path(name),
                code="unknown_parameter",
            )

    def get(
        self,
        name: str,
        kinds: type | tuple[type, ...],
        expected: str,
        *,
        required: bool = False,
    ) -> Any:
        self.read.add(name)
        value = self.object.get(name)
        if value is None:
            if required:
                raise ApiError(
                    400,
                    f"Missing required parameter: '{self._path(name)}'.",
                    param=self._path(name),
                    code="missing_required_parameter",
                )
            return None
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        # JSON true/false are Python ints too: only a boolean field takes them.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise invalid_type(self._path(name), expected, value)
        return value

    def one_of(self, name: str, choices: Iterable[str], *, required: bool = True) -> str | None:
        """A string field that must be one of `choices`."""
        value = self.get(name, str, "a string", required=required)
        if value is not None and value not in choices:
            raise ApiError(
                400,
                f"Invalid value for '{self._path(name)}': {value!r}; expected one of "
                f"{', '.join(choices)}.",
                param=self._path(name),
                code="invalid_value",
            )
        return value

    def int(self, name: str, *, minimum: int, maximum: int | None = None) -> int | None:
        value = self.get(name, int, "an integer")
        self._check_range(name, value, minimum, maximum)
        return value

    def number(
        self, name: str, *, minimum: float, maximum: float, below_maximum: bool = False
    ) -> float | None:
        value = self.get(name, (int, float), "a number")
        self._check_range(name, value, minimum, maximum, below_maximum)
        return None if value is None else float(value)

    def _check_range(
        self,
        name: str,
        value: float | None,
        minimum: float,
        maximum: float | None = None,
        below_maximum: bool = False,
    ) -> None:
        if value is None:
            return
        too_big = maximum is not None and (value >= maximum if below_maximum else value > maximum)
        if value < minimum or too_big:
            bound = f"at least {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            bound += " (exclusive)" if below_maximum else ""
            raise ApiError(
                400,
                f"Invalid value for '{self._path(name)}': expected {bound}, but got {value}.",
                param=self._path(name),
                code="invalid_value",
            )


def invalid_type(param: str, expected: str, value: object) -> ApiError:
    return ApiError(
        400,
        f"Invalid type for '{param}': expected {expected}, but got {_json_type(value)} instead.",
        param=param,
        code="invalid_type",
    )


def _json_type(value: object) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    kinds |= {list: "an array", dict: "an object"}
    return kinds.get(type(value), "null")
