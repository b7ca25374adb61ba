"""Output constraints (JSON Schema, JSON, grammars), enforced token by token with llguidance.

A `ConstraintSpec` says what the answer must be; `compile_constraint` turns it into a `Grammar`
once (a schema or grammar that cannot be compiled is a ConstraintError, before anything runs),
and every generation takes a fresh `Constraint` from it: the matcher's state after the tokens
emitted so far.

The rule is applied where the target's token is chosen (`Constraint.draw`): the target's logits
outside the allowed set are -inf before the draw, so the constrained distribution is
transform(masked logits), the same for the target alone and for every speculative round. A
draft is verified against it like any other, so the text is the constrained target's whatever
drafts it. Two things make drafts cheaper under a constraint:
- `valid_prefix`: a draft token the constraint forbids could never be accepted, so the draft
  ends before it and never costs a verify;
- `forced`: tokens the grammar allows alone from here (a key, a brace) are drafted without
  asking any model.

Why llguidance: its mask at a 151,936-token vocabulary costs tens of microseconds a token
(research/constraint_cost.py), it compiles JSON Schema and Lark (and GBNF through its
converter) itself, rolls back and validates draft tokens, and it is one wheel with no
dependencies. xgrammar needs torch and transformers; llama.cpp's own grammar sampler walks
the whole vocabulary every token.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specllama.engine.sampling import SamplingParams, draw
from specllama.errors import ConstraintError
from specllama.schemas import closed

try:  # the constraint engine; only constrained generations need it
    import llguidance
    from llguidance.gbnf_to_lark import GbnfToLarkError, gbnf_to_lark
except ImportError:  # pragma: no cover - it is a dependency; said once, where used
    llguidance = None

KINDS = ("json_object", "json_schema", "lark", "gbnf", "regex")
# Any JSON object: what OpenAI's response_format {"type": "json_object"} promises.
ANY_OBJECT_SCHEMA = {"type": "object"}


@dataclass(frozen=True)
class ConstraintSpec:
    """What the answer must be. `kind`: one of KINDS; `source`: the JSON Schema (as JSON text),
    the Lark or GBNF grammar, or the regular expression ("" for json_object)."""

    kind: str
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConstraintError(f"unknown constraint kind {self.kind!r}: one of {KINDS}")

    @classmethod
    def json_schema(cls, schema: dict[str, Any] | bool) -> ConstraintSpec:
        """A schema's rule, its objects closed as llama.cpp closes them (`schemas.closed`)."""
        return cls("json_schema", json.dumps(closed(schema)))

    def describe(self) -> str:
        return {"json_object": "a JSON object", "json_schema": "JSON Schema"}.get(
            self.kind, f"{self.kind} grammar"
        )


def _grammar_text(spec: ConstraintSpec) -> str:
    """The spec as llguidance's grammar, or a ConstraintError naming what is wrong."""
    matcher = llguidance.LLMatcher
    try:
        if spec.kind == "json_object":
            return matcher.grammar_from_json_schema(ANY_OBJECT_SCHEMA)
        if spec.kind == "json_schema":
            return matcher.grammar_from_json_schema(json.loads(spec.source), _JSON_OPTIONS)
        if spec.kind == "regex":
            return matcher.grammar_from_regex(spec.source)
        lark = _gbnf_as_lark(spec.source) if spec.kind == "gbnf" else spec.source
        return matcher.grammar_from_lark(lark)
    except (ValueError, TypeError, GbnfToLarkError) as exc:
        raise ConstraintError(f"the {spec.describe()} cannot be read: {exc}") from None


def _gbnf_as_lark(gbnf: str) -> str:
    """llguidance's GBNF reader raises a bare Exception for some mistakes (a rule used but
    never defined): every one of them is the grammar's, said as a ValueError."""
    try:
        return gbnf_to_lark(gbnf)
    except GbnfToLarkError:
        raise
    except Exception as exc:
        raise ValueError(str(exc)) from None


# Compact JSON, as models write it: no free whitespace to wander into (a small model given
# free whitespace can fill max_tokens with blanks). Object keys in the schema's order.
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class Grammar:
    """A spec compiled for one vocabulary: the source of each generation's Constraint."""

    def __init__(self, spec: ConstraintSpec, tokenizer: Any, n_vocab: int) -> None:
        if llguidance is None:
            raise ConstraintError(
                "output constraints need the llguidance package", hint="pip install llguidance"
            )
        self.spec = spec
        self.tokenizer = tokenizer
        self.n_vocab = n_vocab
        self.text = _grammar_text(spec)
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            self.text, tokenizer
        )
        if is_error:  # its first line says what; the rest dumps the grammar
            first = messages[0].splitlines()[0].rstrip()
            raise ConstraintError(f"the {spec.describe()} cannot be compiled: {first}")
        try:
            admits_something = self.start().allowed_count() > 0
        except ConstraintError:
            admits_something = False
        if not admits_something:
            raise ConstraintError(f"the {spec.describe()} admits no text at all")

    def start(self) -> Constraint:
        """A fresh matcher, at the beginning of an answer."""
        matcher = llguidance.LLMatcher(self.tokenizer, self.text, log_level=0)
        if matcher.is_error():
            raise ConstraintError(f"the {self.spec.describe()} failed: {matcher.get_error()}")
        return Constraint(matcher, self.n_vocab)


class Constraint:
    """One answer's matcher: the state after every token emitted so far."""

    def __init__(self, matcher: Any, n_vocab: int) -> None:
        self._matcher = matcher
        self.n_vocab = n_vocab
        self._bits = np.zeros(((n_vocab + 31) // 32,), dtype=np.int32)
        self._n_consumed = 0  # tokens the matcher holds, for lookahead's rollback

    # -- the target's choice ------------------------------------------------------------------

    def allowed(self) -> np.ndarray:
        """A boolean mask over the vocabulary: the tokens the constraint allows next."""
        bits = self._bits
        self._matcher.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
        self._check()
        mask = np.unpackbits(bits.view(np.uint8), count=self.n_vocab, bitorder="little")
        return mask.view(bool)

    def allowed_count(self) -> int:
        return int(np.count_nonzero(self.allowed()))

    def restrict(self, logits: np.ndarray, params: SamplingParams) -> np.ndarray:
        """`logits` with every token the constraint forbids here at -inf: what the target
        draws from. Greedy and the argmax allowed: the logits as they are (the same argmax,
        and no mask to compute, which is most positions of a JSON answer)."""
        if params.greedy and self._matcher.validate_tokens([int(np.argmax(logits))]) == 1:
            return logits
        allowed = self.allowed()
        if not allowed.any():
            raise ConstraintError("the constraint allows no token here")
        # A -inf row with the allowed logits copied in: ~2x cheaper than np.where at 152k
        # tokens (research/RESULTS.md, issue 32).
        row = np.full(self.n_vocab, -np.inf, dtype=np.float32)
        np.copyto(row, logits[: self.n_vocab], where=allowed)
        return row

    def draw(self, logits: np.ndarray, params: SamplingParams, position: int) -> int:
        """The target's token here under the constraint (the draw of `sampling.draw` from the
        masked logits), consumed: the matcher moves past it."""
        token = draw(self.restrict(logits, params), params, position)
        self.consume([token])
        return token

    # -- drafts -------------------------------------------------------------------------------

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from here, the constraint allows in a row."""
        return self._matcher.validate_tokens(list(tokens)) if tokens else 0

    def forced(self, n_max: int) -> list[int]:
        """Up to n_max tokens the grammar allows alone from here (a key, a closing brace):
        a free draft. Empty when the next token is a real choice."""
        if n_max <= 0 or self._matcher.is_stopped():
            return []
        return list(self._matcher.compute_ff_tokens()[:n_max])

    # -- state --------------------------------------------------------------------------------

    def consume(self, tokens: Sequence[int]) -> None:
        if self._matcher.is_stopped():  # complete: what follows is the end, nothing to match
            return
        if not self._matcher.consume_tokens(list(tokens)):
            self._check()
        self._n_consumed += len(tokens)

    def rollback(self, n_tokens: int) -> None:
        if n_tokens:
            self._matcher.rollback(n_tokens)
            self._n_consumed -= n_tokens

    @contextlib.contextmanager
    def lookahead(self) -> Iterator[Constraint]:
        """Consume tokens ahead (a model drafting under the rule) and forget them after."""
        start = self._n_consumed
        try:
            yield self
        finally:
            self.rollback(self._n_consumed - start)

    @property
    def stopped(self) -> bool:
        """The constrained text is complete: only an end-of-generation token may follow."""
        return self._matcher.is_stopped()

    @property
    def accepting(self) -> bool:
        return self._matcher.is_accepting()

    def _check(self) -> None:
        if self._matcher.is_error():
            # The first line says what; the rest is llguidance's dump of its parser state.
            error = self._matcher.get_error().splitlines()[0]
            raise ConstraintError(f"the constraint failed: {error}")


def compile_constraint(spec: ConstraintSpec, tokenizer: Any, n_vocab: int) -> Grammar:
    """`spec` for the vocabulary of `tokenizer` (`specllama.llama.grammar.tokenizer_for`)."""
    return Grammar(spec, tokenizer, n_vocab)
