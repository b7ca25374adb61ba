"""Every command's --help renders: option help is rich markup, and a stray `[/X]` breaks it."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from specllama.cli.app import app

COMMANDS = sorted(command.name for command in typer.main.get_group(app).commands.values())


def test_the_app_has_commands():
    assert {"run", "chat", "bench", "serve", "models", "doctor"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_renders_every_option(command):
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    if command in {"run", "bench"}:
        assert "ollama:NAME[:TAG]" in result.output
        assert "lmstudio:PUBLISHER/REPO[/FILE]" in result.output
