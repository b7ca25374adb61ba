"""cli: a face, the command line.

Thin Typer commands and their shared options, the rich views, the chat REPL and `worker`. The
one place where errors become a red line and an exit code.

May import: everything (server and bench too: `serve` and `bench` are commands).
"""
