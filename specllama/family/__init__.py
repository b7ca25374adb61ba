"""A model family's way of writing: its thinking, its tool calls, its end of turn, learnt from
its chat template (render a known call and a plain answer, compare), written by hand only where
the template cannot tell (gpt-oss's channels).

The engine's text goes through one reader (`reader.AnswerReader`) that gives typed pieces
(`pieces.Piece`: thinking, text, a call as it is written); every face (the server's wire
formats, `run`, `chat`) only writes those pieces out.

May import the top-level modules (`chat`, `chat_template`, `schemas`, `errors`, `tool_calls`,
`json_text`) and nothing else: the session, the server and the CLI read answers
through it; the engine never does (it works with tokens).
"""
