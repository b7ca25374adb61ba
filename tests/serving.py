"""A real `specllama serve` in a subprocess, and what tests ask of it: raw HTTP, the official
`openai` client, and the answers of `specllama run` with the target alone to compare with."""

from __future__ import annotations

import functools
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
from typer.testing import CliRunner

from specllama.cli.app import app

KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON_POST = {**AUTH, "Content-Type": "application/json"}  # what every POST must carry
CTX = 512
PROMPT = "Name three fruits."
COUNTING = "1, 2, 3, 4,"  # a text completion that goes on for as long as it is allowed


@dataclass
class Server:
    url: str
    model: str
    log: Path
    process: subprocess.Popen

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").split(":")
        return host, int(port)

    def client(self, **kwargs) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=KEY, max_retries=0, **kwargs)

    def request(
        self, method: str, path: str, body: object = None, headers: dict | None = None
    ) -> tuple[int, dict[str, str], dict]:
        """Raw HTTP: (status, headers, JSON body)."""
        conn = http.client.HTTPConnection(*self.address, timeout=60)
        data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
        sent = JSON_POST if data is not None else AUTH
        conn.request(method, path, body=data, headers={**sent, **(headers or {})})
        response = conn.getresponse()
        payload = json.loads(response.read())
        conn.close()
        return response.status, dict(response.getheaders()), payload

    def health(self) -> dict:
        return self.request("GET", "/health")[2]

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.health()["generating"] or self.health()["waiting"]:
            assert time.monotonic() < deadline, "the server stays busy"
            time.sleep(0.05)


def serve(
    target: Path,
    extra: list[str],
    log: Path,
    ctx: int = CTX,
    env: dict | None = None,
    threads: int = 2,
) -> Iterator[Server]:
    """`specllama serve` on `target` in a subprocess until the test is done, then Ctrl-C."""
    command = [sys.executable, "-m", "specllama", "serve", "--target", str(target), *extra]
    command += ["--ctx", str(ctx), "--threads", str(threads), "--port", "0"]
    if "--parallel" not in extra:  # the queue's tests count on one generation at a time
        command += ["--parallel", "1"]
    env = {**os.environ, "SPECLLAMA_API_KEY": KEY, "NO_COLOR": "1", **(env or {})}
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    try:
        url = _wait_for_url(log, process)
        started = Server(url, target.name, log, process)
        _wait_until_up(started)
        yield started
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    # Stopped with Ctrl-C: a clean exit, and no traceback ever reached the terminal.
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text, text


def _wait_for_url(log: Path, process: subprocess.Popen) -> str:
    deadline = time.monotonic() + 120
    while not (found := re.search(r"specllama serve (http://\S+)/v1", log.read_text())):
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return found.group(1)


def _wait_until_up(server: Server) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            server.health()
            return
        except OSError:  # refused until the models are loaded
            assert time.monotonic() < deadline
            time.sleep(0.1)


@functools.cache
def reference(
    prompt: str, max_tokens: int, *, template: bool = True, target: Path | None = None
) -> tuple[str, int]:
    """`specllama run` with the target alone, greedy: (text, tokens generated)."""
    extra = ["--json"] + ([] if template else ["--no-chat-template"])
    data = json.loads(run_target_alone(prompt, max_tokens, *extra, target=target)[-1])
    return data["text"], data["n_generated"]


def run_target_alone(prompt: str, max_tokens: int, *extra: str, target: Path | None = None):
    """The lines `specllama run --drafter none` writes on stdout (SmolLM2 F32 by default)."""
    from model_factory import smollm2_f32

    args = ["run", prompt, "--target", str(target or smollm2_f32()), "-n", str(max_tokens)]
    args += ["--drafter", "none", "--ctx", str(CTX), "--threads", "2", *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


# A Hermes-style tool template (Qwen2.5's, shortened) for SmolLM2, whose own template knows no
# tools: the F32 copy that wears it is a tool-capable model on which a greedy answer under the
# tool grammar can be compared token for token across drafters.
HERMES_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions. Function signatures within "
    "<tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each call, return a JSON object with the function name and "
    'arguments within <tool_call></tool_call> tags:\\n<tool_call>\\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for call in message.tool_calls or [] %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' + call.function.name + \'", "arguments": \' }}'
    "{{- call.function.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response>"
    "<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def smollm2_f32_tools() -> Path:
    """The F32 SmolLM2 wearing HERMES_TEMPLATE (built once into the test models' cache)."""
    from model_factory import cache_dir, copy_gguf, smollm2_f32

    path = cache_dir() / "SmolLM2-135M-Instruct.F32.tools.gguf"
    if not path.exists():
        partial = path.with_suffix(".partial")
        copy_gguf(smollm2_f32(), partial, chat_template=HERMES_TEMPLATE)
        partial.replace(path)
    return path


def chat(server: Server, prompt: str = PROMPT, max_tokens: int = 24, **kwargs):
    messages = [{"role": "user", "content": prompt}]
    return server.client().chat.completions.create(
        model=server.model, messages=messages, max_tokens=max_tokens, **kwargs
    )


def start_stream(server: Server, max_tokens: int) -> http.client.HTTPConnection:
    """A streaming text completion that goes on counting, read until its first piece of text
    arrived: the server is then busy with it until the connection closes."""
    connection = http.client.HTTPConnection(*server.address, timeout=60)
    body = {"model": server.model, "prompt": COUNTING, "max_tokens": max_tokens, "stream": True}
    connection.request("POST", "/v1/completions", json.dumps(body), JSON_POST)
    response = connection.getresponse()
    assert response.status == 200
    while '"text":"' not in response.readline().decode():
        pass
    return connection


def metric_samples(server: Server) -> dict[tuple[str, tuple], float]:
    """GET /metrics, parsed by Prometheus' own parser: value by (name, sorted labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    connection = http.client.HTTPConnection(*server.address, timeout=60)
    connection.request("GET", "/metrics", headers=AUTH)
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    assert response.status == 200, text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
