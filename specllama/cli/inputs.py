"""What a command reads besides its options: the prompt (an argument, stdin, or both), a
prediction of the answer, and the rule an answer must follow (--json-schema, --grammar), each
refused in one usage line when it cannot be used.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specllama.engine.constraint import ConstraintSpec, Grammar
from specllama.errors import ConstraintError, UsageError
from specllama.session import Engine


def read_prediction(path: Path | None) -> str | None:
    """--prediction FILE's text (None: no prediction), or one usage line."""
    return None if path is None else _read_text_file(path, "--prediction")


def constraint_spec(json_schema: Path | None, grammar: Path | None) -> ConstraintSpec | None:
    """--json-schema FILE or --grammar FILE -> what every answer must be (None: free text).
    The files are read and the schema parsed here, before any model loads; whether it
    compiles is the engine's to say (`Engine.compile_constraint`)."""
    if json_schema is not None and grammar is not None:
        raise UsageError("--json-schema and --grammar exclude each other: pick one")
    if json_schema is not None:
        text = _read_text_file(json_schema, "--json-schema")
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--json-schema {json_schema} is not JSON: {exc.msg} (line {exc.lineno}, "
                f"column {exc.colno})"
            ) from None
        if not isinstance(schema, dict | bool):
            raise UsageError(
                f"--json-schema {json_schema} is not a JSON Schema: it holds a JSON "
                f"{type(schema).__name__}, not an object"
            )
        return ConstraintSpec.json_schema(schema)
    if grammar is not None:
        text = _read_text_file(grammar, "--grammar")
        kind = "lark" if grammar.suffix.lower() == ".lark" else "gbnf"
        return ConstraintSpec(kind, text)
    return None


def compile_rule(engine: Engine, spec: ConstraintSpec | None) -> Grammar | None:
    """`spec` compiled for the loaded target (None: free text). llguidance's compile errors
    carry a dump of the grammar under their first line; the first line says what is wrong."""
    if spec is None:
        return None
    try:
        return engine.compile_constraint(spec)
    except ConstraintError as exc:
        first = str(exc).splitlines()[0].rstrip()
        raise ConstraintError(first, hint=exc.hint) from None


def _read_text_file(path: Path, option: str) -> str:
    """A text file an option names, or one usage line saying what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{option} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{option} {path} is a folder, not a file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{option} {path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{option} {path} cannot be read: {exc.strerror}") from None
    if not text.strip():
        raise UsageError(f"{option} {path} is empty")
    return text


def check_max_tokens(max_tokens: int) -> None:
    if max_tokens < 1:
        raise UsageError(f"--max-tokens must be at least 1, got {max_tokens}")


def read_prompt(argument: str | None) -> str:
    """The prompt argument, stdin when piped, or both (stdin appended as context)."""
    piped = None
    if not sys.stdin.isatty():
        raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        piped = _decode_stdin(raw) if isinstance(raw, bytes) else raw
    parts = [p for p in (argument, piped) if p and p.strip()]
    if not parts:
        raise UsageError("the prompt is empty: pass it as an argument or pipe it on stdin")
    return "\n\n".join(p.strip("\n") for p in parts)


def _decode_stdin(raw: bytes) -> str:
    if b"\x00" in raw:
        raise UsageError(
            "stdin looks like a binary file, not text", hint="pipe a text file, or the prompt"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"stdin is not UTF-8 text (byte {exc.start})",
            hint="convert it first, e.g. iconv -f latin1 -t utf-8 FILE | specllama run ...",
        ) from None
