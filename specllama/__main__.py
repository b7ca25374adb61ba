from specllama.cli.app import app

app(prog_name="specllama")
