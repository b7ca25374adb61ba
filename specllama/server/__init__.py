"""server: a face, the HTTP APIs (`specllama serve`): OpenAI's Chat and text Completions and
Responses, Anthropic's Messages, and the chat page.

The app and its guard, and how it runs (running: the socket, the banner, uvicorn, signals);
one module per wire format, each reading into the one request type (request, fields) and
writing its answer back (wire), a job's outputs taken to the client as events or one body
(answering); the preparation of a request; the queue and its slots (queue, slots), the driver
that turns one generation's engine events into its answer (driver), the prompt cache; what GET
/metrics counts and shows (metrics).

May import: session, policy, engine, models, llama, chat, errors, paths.
"""
