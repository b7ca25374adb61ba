"""The target's vocabulary as llguidance sees it: what output constraints are compiled for.

llguidance reads every token's bytes (control tokens, and added tokens written like one, marked
as special with a leading 0xff, as its own llama.cpp bridge does) and calls llama.cpp's own
tokenizer through the vocabulary pointer: only this door may hold that pointer. Building it
reads all ~150,000 tokens once (about a second), so it is kept with the model.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

from specllama.errors import ConstraintError

_tokenizers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
SPECIAL = b"\xff"  # llguidance's mark of a special token's text


def tokenizer_for(backend: Any) -> Any:
    """The llguidance tokenizer of `backend`'s vocabulary (a LlamaBackend), built once per
    loaded model. Every end-of-generation token may end a constrained answer."""
    if backend in _tokenizers:
        return _tokenizers[backend]
    try:
        from llguidance import LLTokenizer
    except ImportError:
        raise ConstraintError(
            "output constraints need the llguidance package", hint="pip install llguidance"
        ) from None
    lib, vocab = backend._lib, backend._vocab
    tokens = [_token_bytes(lib, vocab, backend, t) for t in range(backend.n_vocab)]
    eog = [t for t in range(backend.n_vocab) if backend.is_eog(t)] or [backend.vocab.eos]
    tokenize = ctypes.cast(lib.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
    tokenizer = LLTokenizer.from_llamacpp(
        tokens=tokens, vocab_ptr=vocab, tokenize_fptr=tokenize, eos_token=eog, slices=None
    )
    _tokenizers[backend] = tokenizer
    return tokenizer


def _token_bytes(lib: Any, vocab: Any, backend: Any, token: int) -> bytes:
    text = backend.token_bytes(token, special=True)
    attr = lib.llama_vocab_get_attr(vocab, token)
    looks_special = text.startswith(b"<") and text.endswith(b">")
    if attr & lib.LLAMA_TOKEN_ATTR_CONTROL or (
        attr & lib.LLAMA_TOKEN_ATTR_USER_DEFINED and looks_special
    ):
        return SPECIAL + text
    return text
