"""server: a face, the HTTP APIs (`specllama serve`): OpenAI's Chat and text Completions and
Responses, Anthropic's Messages, and the chat page.

The app and its guard; one module per wire format, each reading into the one request type
(request, fields) and writing its answer back (wire); the preparation of a request; the
queue that runs one generation at a time.

May import: session, policy, engine, models, llama, chat, errors, paths.
"""
