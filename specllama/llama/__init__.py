"""llama: the only door to llama.cpp.

The backend (a model and its context: decode, rollback, vocabulary), the build's facts, the AMX
check, GGUF header reading, and ggml's RPC backend through ctypes. Nothing else in specllama
imports `llama_cpp`; everything above works with token ids and numpy arrays.

May import: errors, paths.
"""
