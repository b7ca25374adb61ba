"""Can this draft model draft for that target? The rules llama.cpp's speculative example uses.

Draft tokens are handed to the target by id, so both models must mean the same thing by every id
the draft can produce: same tokenizer type, same BOS/EOS handling, vocabulary sizes within
128 of each other (padding rows), and identical token text from id 5 up (the first ids are
often model-specific control tokens).

One rule, two sources: loaded models (`check_compatible`, what `run` applies) and GGUF headers
(`header_difference`, what the local model listing pairs by, from a `VocabPrint`).
"""

from __future__ import annotations

from typing import Protocol

from specllama.errors import IncompatibleVocabError
from specllama.llama.vocab import (
    FIRST_CHECKED_TOKEN,
    MAX_VOCAB_SIZE_DIFFERENCE,
    VocabInfo,
    VocabPrint,
)

__all__ = [
    "FIRST_CHECKED_TOKEN",
    "MAX_VOCAB_SIZE_DIFFERENCE",
    "check_compatible",
    "header_difference",
    "vocab_difference",
]


class HasVocab(Protocol):
    @property
    def vocab(self) -> VocabInfo: ...

    def token_text(self, token: int) -> bytes: ...


def check_compatible(draft: HasVocab, target: HasVocab) -> None:
    """Raise IncompatibleVocabError naming the first difference; return None if compatible."""
    d, t = draft.vocab, target.vocab
    if (reason := vocab_difference(d, t)) is not None:
        _refuse(reason)
    for token in range(FIRST_CHECKED_TOKEN, min(d.n_vocab, t.n_vocab)):
        draft_text, target_text = draft.token_text(token), target.token_text(token)
        if draft_text != target_text:
            _refuse(
                f"token {token} differs: draft {draft_text!r}, target {target_text!r}",
            )


def vocab_difference(d: VocabInfo, t: VocabInfo) -> str | None:
    """Every rule but the token texts: None when they hold, else why not."""
    if d.vocab_type != t.vocab_type:
        return f"tokenizer types differ (draft {d.vocab_type}, target {t.vocab_type})"
    if d.add_bos != t.add_bos or (d.add_bos and d.bos != t.bos):
        return f"BOS handling differs (draft bos={d.bos}, target bos={t.bos})"
    if d.eos != t.eos:
        return f"EOS ids differ (draft {d.eos}, target {t.eos})"
    if abs(d.n_vocab - t.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE:
        return f"vocabulary sizes differ too much (draft {d.n_vocab}, target {t.n_vocab})"
    return None


def header_difference(
    draft: VocabInfo, draft_print: VocabPrint, target: VocabInfo, target_print: VocabPrint
) -> str | None:
    """The same rule from GGUF headers: None when compatible, else why not. Prints of
    different sizes need their detail (`read_header(..., detail=True)`)."""
    if (reason := vocab_difference(draft, target)) is not None:
        return reason
    return draft_print.first_difference(target_print)


def _refuse(reason: str) -> None:
    raise IncompatibleVocabError(
        f"the draft model cannot draft for this target: {reason}",
        hint="pick a draft from the same model family (see `specllama models`)",
    )
