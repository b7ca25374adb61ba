"""Quantise a GGUF file with llama.cpp's own quantiser: python quantize.py IN OUT [TYPE]."""

from __future__ import annotations

import os
import sys

import llama_cpp

FTYPES = {"q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, "f16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16}


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
    source, dest = sys.argv[1], sys.argv[2]
    kind = sys.argv[3] if len(sys.argv) > 3 else "q4_k_m"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[kind]
    params.nthread = os.cpu_count() or 1
    params.allow_requantize = True
    status = llama_cpp.llama_model_quantize(source.encode(), dest.encode(), params)
    sys.exit(status)


if __name__ == "__main__":
    main()
