"""The one family of errors that specllama raises on purpose.

The CLI catches SpecllamaError in one place and prints it as one line (with its hint);
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class SpecllamaError(Exception):
    """An error the user can act on. `hint` says how; `exit_code` is what the CLI returns."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UsageError(SpecllamaError):
    """Bad options or arguments (exit code 2, like the shell convention)."""

    exit_code = 2


class ModelLoadError(SpecllamaError):
    """A model file is missing, unreadable or not a GGUF file llama.cpp accepts."""


class ContextOverflowError(SpecllamaError):
    """The prompt (plus what must be generated) does not fit in the context window."""


class IncompatibleVocabError(SpecllamaError):
    """The draft and target models do not share a vocabulary."""


class CatalogError(SpecllamaError):
    """models.toml (or a user catalogue) is malformed, or a name is not in it."""


class DownloadError(SpecllamaError):
    """A model could not be fetched or failed its checksum."""


class RpcError(SpecllamaError):
    """A worker given with --rpc cannot be reached, refuses the handshake, or was lost; or this
    llama.cpp build has no RPC backend."""


class LocalModelError(SpecllamaError):
    """A model already on this machine cannot be used: an unknown `ollama:` or `lmstudio:`
    name, no draft found for --draft auto, or a bad setting of extra model folders."""


class ConstraintError(SpecllamaError):
    """An output constraint (JSON Schema, grammar) that cannot be compiled, admits no text, or
    failed during a generation."""
