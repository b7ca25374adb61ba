"""Can this draft model draft for that target? The rules llama.cpp's speculative example uses.

Draft tokens are handed to the target by id, so both models must mean the same thing by every id
the draft can produce: same tokenizer type, same BOS/EOS handling, vocabulary sizes within
128 of each other (padding rows), and identical token text from id 5 up (the first ids are
often model-specific control tokens).

One rule, two sources: loaded models (`check_compatible`; `pairing`, what `run` applies) and
GGUF headers (`header_difference`, what the local model listing pairs by, from a `VocabPrint`).

A pair that fails it may still draft across tokenizers (`specllama.engine.cross_drafter`: the
draft's text, re-tokenised for the target), when both tokenizers give back exactly the text they
read (`pairing` says which, or refuses the pair in one line). A SentencePiece tokenizer that adds
a space before every text it reads does not: its tokens of a piece of text spell another text.
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
    "ROUND_TRIP_TEXTS",
    "check_compatible",
    "check_round_trip",
    "header_difference",
    "pairing",
    "shared_vocabulary_difference",
    "vocab_difference",
]

# llama.cpp's vocabulary types (enum llama_vocab_type), for messages.
VOCAB_TYPES = {1: "SentencePiece", 2: "byte-level BPE", 3: "WordPiece", 4: "Unigram", 5: "RWKV"}

# Text a drafter across tokenizers must get back from tokens: a word, one mid-text (a leading
# space), line breaks, runs of spaces, code, and characters of several bytes.
ROUND_TRIP_TEXTS = (
    "Hello world",
    " world",
    "\n\nif (x) {\n    return f(a, b);\n}",
    "a  b\t c",
    "café, naïve, 日本語 ✓",
)


class HasVocab(Protocol):
    @property
    def vocab(self) -> VocabInfo: ...

    def token_text(self, token: int) -> bytes: ...


class HasText(HasVocab, Protocol):
    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]: ...

    def token_bytes(self, token: int, *, special: bool = False) -> bytes: ...


def check_compatible(draft: HasVocab, target: HasVocab) -> None:
    """Raise IncompatibleVocabError naming the first difference; return None if compatible."""
    if (reason := shared_vocabulary_difference(draft, target)) is not None:
        _refuse(reason)


def shared_vocabulary_difference(draft: HasVocab, target: HasVocab) -> str | None:
    """None when the draft's token ids mean what the target's do, else the first difference."""
    d, t = draft.vocab, target.vocab
    if (reason := vocab_difference(d, t)) is not None:
        return reason
    for token in range(FIRST_CHECKED_TOKEN, min(d.n_vocab, t.n_vocab)):
        draft_text, target_text = draft.token_text(token), target.token_text(token)
        if draft_text != target_text:
            return f"token {token} differs: draft {draft_text!r}, target {target_text!r}"
    return None


def pairing(draft: HasText, target: HasText) -> str | None:
    """How the draft drafts for the target: None when they share a vocabulary (token ids are
    handed over); else the one line to show, that it drafts across tokenizers (its text is
    re-tokenised). IncompatibleVocabError when it cannot do either."""
    difference = shared_vocabulary_difference(draft, target)
    if difference is None:
        return None
    check_round_trip(draft, target, difference)
    return f"drafting across tokenizers ({difference}): the draft's text is re-tokenised"


def check_round_trip(draft: HasText, target: HasText, difference: str = "") -> None:
    """Drafting across tokenizers needs each to give back the text it reads, byte for byte
    (`ROUND_TRIP_TEXTS`); IncompatibleVocabError names the first that does not."""
    for role, model in (("draft", draft), ("target", target)):
        for text in ROUND_TRIP_TEXTS:
            tokens = model.tokenize(text, add_bos=False, special=False)
            back = b"".join(model.token_bytes(token) for token in tokens)
            if back != text.encode("utf-8"):
                kind = VOCAB_TYPES.get(model.vocab.vocab_type, "its")
                raise IncompatibleVocabError(
                    f"the draft model cannot draft for this target, not even across tokenizers: "
                    f"the {role}'s {kind} tokenizer reads {text!r} back as "
                    f"{back.decode('utf-8', 'replace')!r}"
                    + (f" (and {difference})" if difference else ""),
                    hint=_ROUND_TRIP_HINTS[role],
                )


def vocab_difference(d: VocabInfo, t: VocabInfo) -> str | None:
    """Every rule but the token texts: None when they hold, else why not."""
    if d.vocab_type != t.vocab_type:
        kinds = (VOCAB_TYPES.get(v.vocab_type, str(v.vocab_type)) for v in (d, t))
        return "tokenizer types differ (draft {}, target {})".format(*kinds)
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


_ROUND_TRIP_HINTS = {
    "draft": "pick a draft of the target's vocabulary, or one whose tokenizer is byte-level BPE",
    "target": "this target takes drafts of its own vocabulary only (see `specllama models`)",
}


def _refuse(reason: str) -> None:
    raise IncompatibleVocabError(
        f"the draft model cannot draft for this target: {reason}",
        hint="pick a draft from the same model family (see `specllama models`)",
    )
