"""The target's vocabulary as llguidance sees it: what output constraints are compiled for.

llguidance reads every token's bytes (control tokens marked as special) and calls llama.cpp's
own tokenizer, through llama.cpp's vocabulary pointer: only this door may hold that pointer.
Building it reads all ~150,000 tokens once (about a second), so it is kept with the model.
"""

from __future__ import annotations

import weakref
from typing import Any

from specllama.errors import ConstraintError

_tokenizers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def tokenizer_for(backend: Any) -> Any:
    """The llguidance tokenizer of `backend`'s vocabulary (a LlamaBackend), built once per
    loaded model. Every end-of-generation token may end a constrained answer."""
    if backend in _tokenizers:
        return _tokenizers[backend]
    try:
        from llguidance.llamacpp import lltokenizer_from_vocab
    except ImportError:
        raise ConstraintError(
            "output constraints need the llguidance package", hint="pip install llguidance"
        ) from None
    n_vocab = backend.n_vocab
    eog = [t for t in range(n_vocab) if backend.is_eog(t)] or [backend.vocab.eos]
    tokenizer = lltokenizer_from_vocab(backend._vocab, n_vocab=n_vocab, eos_token=eog)
    _tokenizers[backend] = tokenizer
    return tokenizer
