from specllama.cli import app

app(prog_name="specllama")
