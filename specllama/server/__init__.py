"""server: a face, the OpenAI-compatible HTTP API (`specllama serve`).

The app, request parsing, the queue that runs one generation at a time, and the responses.

May import: session, policy, engine, models, llama, chat, errors, paths.
"""
