"""The AMX probe's child process: `python -m specllama.llama.amx_probe MODEL.gguf`.

Loads the model with llama.cpp's extra buffer types on and decodes a few batches; prints "ok" if
it lives. `specllama.llama.amx` runs it and reads how it ended (a signal means the kernels crash
here). A module of its own so that amx.py, which the backend asks, never imports the backend.
"""

from __future__ import annotations

import sys

from specllama.llama.amx import PROBE_BATCH, PROBE_DECODES
from specllama.llama.backend import LlamaBackend, default_threads


def main(model_path: str) -> None:
    # At least two threads: the crash happens in ggml's worker threads.
    threads = max(2, default_threads())
    with LlamaBackend(
        model_path, n_ctx=256, n_batch=PROBE_BATCH, n_threads=threads, extra_buffers=True
    ) as model:
        tokens = [(i * 7919) % max(model.n_vocab - 1, 1) + 1 for i in range(PROBE_BATCH)]
        for _ in range(PROBE_DECODES):
            model.rollback(0)
            model.decode(tokens, [PROBE_BATCH - 1])
    print("ok", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
