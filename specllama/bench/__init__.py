"""bench: a face, `specllama bench`.

Runs configurations side by side on the same prompts in one process, against the target alone;
the bundled prompts, and the report.

May import: session, policy, engine, models, llama, chat, errors, paths.
"""
