"""bench: a face, `specllama bench`.

Runs configurations side by side on the same prompts in one process, against the target alone:
the plan (quick, or --full: `plan`), the configurations (`configs`), the runs and their
schedule (`runner`), the time left (`timing`), the arithmetic of the report (`summary`), what the
terminal shows (`report`), the HTML page (`html_report`), the PNG plot (`plot`), llama.cpp's own
speculative decoding beside ours (`llamacpp`: its binary, run as a program), the bundled prompts
(`prompts`), and `models --local --measure`'s probe (`pair_probe`).

May import: session, policy, engine, models, llama, chat, errors, paths. Never llama.cpp's
Python binding (only specllama.llama does); running llama.cpp's own programs is allowed.
"""
