"""Can this draft model draft for that target? The rules llama.cpp's speculative example uses.

Draft tokens are handed to the target by id, so both models must mean the same thing by every id
the draft can produce: same tokenizer type, same BOS/EOS handling, vocabulary sizes within
128 of each other (padding rows), and identical token text from id 5 up (the first ids are
often model-specific control tokens).
"""

from __future__ import annotations

from typing import Protocol

from specllama.errors import IncompatibleVocabError
from specllama.llama.backend import VocabInfo

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5


class HasVocab(Protocol):
    @property
    def vocab(self) -> VocabInfo: ...

    def token_text(self, token: int) -> bytes: ...


def check_compatible(draft: HasVocab, target: HasVocab) -> None:
    """Raise IncompatibleVocabError naming the first difference; return None if compatible."""
    d, t = draft.vocab, target.vocab
    if d.vocab_type != t.vocab_type:
        _refuse(f"tokenizer types differ (draft {d.vocab_type}, target {t.vocab_type})")
    if d.add_bos != t.add_bos or (d.add_bos and d.bos != t.bos):
        _refuse(f"BOS handling differs (draft bos={d.bos}, target bos={t.bos})")
    if d.eos != t.eos:
        _refuse(f"EOS ids differ (draft {d.eos}, target {t.eos})")
    if abs(d.n_vocab - t.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE:
        _refuse(f"vocabulary sizes differ too much (draft {d.n_vocab}, target {t.n_vocab})")
    for token in range(FIRST_CHECKED_TOKEN, min(d.n_vocab, t.n_vocab)):
        draft_text, target_text = draft.token_text(token), target.token_text(token)
        if draft_text != target_text:
            _refuse(
                f"token {token} differs: draft {draft_text!r}, target {target_text!r}",
            )


def _refuse(reason: str) -> None:
    raise IncompatibleVocabError(
        f"the draft model cannot draft for this target: {reason}",
        hint="pick a draft from the same model family (see `specllama models`)",
    )
