"""What a context has evaluated: the token record every backend keeps (`EvaluatedTokens`, shared
with the tests' fake backend), a saved state, and one sequence's part of a shared batch.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Part:
    """One sequence's share of a batch shared by several (`LlamaBackend.decode_parts`)."""

    seq: int
    first_pos: int
    tokens: Sequence[int]
    logits_at: Sequence[int]  # sorted indices into `tokens`


@dataclass(frozen=True)
class SavedState:
    """A context's evaluated tokens and its KV cache's bytes (llama.cpp's sequence state)."""

    tokens: tuple[int, ...]
    data: ctypes.Array
    size: int  # bytes of `data` written


class DecodeInterrupted(Exception):
    """A long decode stopped between its chunks (its `interrupted` check said so), or llama.cpp
    aborted one (`LlamaBackend.abort_decodes`): what was evaluated before stays evaluated."""


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    for mine, theirs in zip(a, b):
        if mine != theirs:
            break
        n += 1
    return n


class EvaluatedTokens:
    """The record of what a context has evaluated, and how to bring it to any sequence.

    A subclass provides `decode(tokens, logits_at)`, which appends to `self.tokens`, and
    `_forget(n_past)`, which drops its cache after the first n_past tokens. (The tests' fake
    backend shares this bookkeeping with the real one.)
    """

    tokens: list[int]
    # How many tokens a rollback may drop right after a decode (None: any number).
    max_rollback: int | None = None
    # Time its decodes spent on other sequences' tokens, in a step shared with them (a
    # server's slots): part of a round's wall time, but not what the round cost.
    waited_seconds: float = 0.0
    # Asked before each chunk of a long decode but its first (a prompt's, in pieces): True
    # stops it there with DecodeInterrupted, keeping the chunks already evaluated, so that a
    # client gone away stops its prompt within a chunk and a retry goes on from there.
    interrupted: Callable[[], bool] | None = None

    def batch_price(self) -> tuple[float, float] | None:
        """Beside other sequences decoded with it (a server's slots): (its share of the batched
        step its next decode joins, the seconds each more token adds to it); None alone."""
        return None

    def decode(
        self, tokens: Sequence[int], logits_at: Sequence[int] = (), *, copy: bool = True
    ) -> np.ndarray:
        raise NotImplementedError

    def _forget(self, n_past: int) -> None:
        raise NotImplementedError

    def stop_if_interrupted(self) -> None:
        """Between two chunks of a decode: raise DecodeInterrupted when asked to stop."""
        if self.interrupted is not None and self.interrupted():
            raise DecodeInterrupted(f"stopped after {self.n_past} tokens")

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def rollback(self, n_past: int) -> None:
        """Forget everything after the first `n_past` tokens."""
        if n_past < self.n_past:
            self._forget(n_past)
            del self.tokens[n_past:]

    def common_prefix(self, tokens: Sequence[int]) -> int:
        evaluated = self.tokens
        if len(evaluated) <= len(tokens) and list(tokens[: len(evaluated)]) == evaluated:
            return len(evaluated)  # the usual case, compared at C speed
        return common_prefix_length(evaluated, tokens)

    def sync(self, tokens: Sequence[int], logits_at_last: bool = False) -> np.ndarray | None:
        """Make the context hold exactly `tokens`, reusing the common prefix.

        With `logits_at_last`, returns the logits after the last token (re-evaluating it if it
        was already in the cache, since llama.cpp keeps no logits for old positions), as a view
        valid until the next decode.
        """
        keep = self.common_prefix(tokens)
        if logits_at_last and keep == len(tokens):
            keep -= 1
        self.rollback(keep)
        rest = list(tokens[keep:])
        if not logits_at_last:
            self.decode(rest)
            self.checkpoint()
            return None
        logits = self.decode(rest, [len(rest) - 1], copy=False)[0]
        self.checkpoint()
        return logits

    def checkpoint(self) -> None:
        """Remember the state here, where a rollback cannot reach back on its own (recurrent
        models); a no-op for a KV cache."""
