#!/usr/bin/env python3
"""What reading one long tool call costs while it streams: one `write` call of ~33 KB (a ~30 KB
string argument, code with quotes, backslashes and newlines), as each family's real template
writes it, read by the answer reader (`family.reader.AnswerReader`, the format from
`family.detect.tool_format`) fed 4 characters at a time (as the engine's text comes) and fed
whole. A reader that rescans what it read at every feed grows with the square of the call.

    python research/streamed_call_cost.py [--repeats 3] [--step 4] [--size 30000]

Run from the repository root (it imports the tests' `chat_templates`, which unpacks the real
templates from the llama-cpp-python sdist). Prints, per format, the median over repeats of the
reader's total time (feeds and finish), its spread (min-max), the time per feed (flat as the
call grows when a feed costs its own text, not the text so far), and the ratio streamed / whole.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from chat_templates import all_templates  # noqa: E402

from specllama.family.detect import tool_format  # noqa: E402
from specllama.family.harmony import HarmonyFormat  # noqa: E402
from specllama.family.probes import written_calls  # noqa: E402
from specllama.family.reader import AnswerReader  # noqa: E402
from specllama.tool_calls import Tool  # noqa: E402

# The five families measured when the arguments began to stream (issue 52, item 2).
FAMILIES = {
    "Hermes": "Qwen-Qwen2.5-7B-Instruct",
    "Mistral Nemo": "mistralai-Mistral-Nemo-Instruct-2407",
    "Kimi-K2": "moonshotai-Kimi-K2",
    "Apertus": "Apertus-8B-Instruct",
    "Qwen3-Coder": "Qwen3-Coder",
    "gpt-oss": "openai-gpt-oss-120b",  # its own reader (channels), not the CallStream
}

WRITE = Tool(
    "write",
    "Write a file",
    {
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["file_path", "content"],
    },
)


def file_content(size: int) -> str:
    """About `size` characters of Python, with the characters JSON escapes."""
    block = (
        "def greet(name: str) -> str:\n"
        '    """Say hello; a \\"quoted\\" word, a tab\\t and a path C:\\\\tmp."""\n'
        "    return f'Hello, {name}!'  # é ü ✓\n\n"
    )
    return (block * (size // len(block) + 1))[:size]


def timed(template: str, text: str, step: int, content: str) -> tuple[float, int]:
    """The reader's total time over `text` fed `step` characters at a time, and how many
    argument pieces it gave (the call it reads must write `content`)."""
    fmt = tool_format(template, [WRITE])
    reader = fmt.reader() if isinstance(fmt, HarmonyFormat) else AnswerReader(calls=fmt)
    pieces = 0
    begin = time.perf_counter()
    for at in range(0, len(text), step):
        pieces += sum(p.kind == "call_args" for p in reader.feed(text[at : at + step]))
    pieces += sum(p.kind == "call_args" for p in reader.finish())
    elapsed = time.perf_counter() - begin
    (call,) = reader.result().calls
    assert json.loads(call.arguments)["content"] == content
    return elapsed, pieces


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step", type=int, default=4)
    parser.add_argument("--size", type=int, default=30_000)
    args = parser.parse_args()
    arguments = {"file_path": "src/greetings.py", "content": file_content(args.size)}
    print(f"{cpu_name()}; Python {platform.python_version()}; median of {args.repeats}")
    fed_by = f"fed by {args.step} (min-max)"
    header = (
        f"{'format':<14}{'chars':>8}  {fed_by:>29}  {'per feed':>9}  {'whole (min-max)':>24}"
        "   ratio"
    )
    print(header)
    templates = all_templates()
    for label, name in FAMILIES.items():
        template = templates[name]
        text = written_calls(template, [("write", arguments)])
        kind = type(tool_format(template, [WRITE])).__name__
        runs = {"fed": [], "whole": []}
        pieces = 0
        for _ in range(args.repeats):
            seconds, pieces = timed(template, text, args.step, arguments["content"])
            runs["fed"].append(seconds)
            runs["whole"].append(timed(template, text, len(text), arguments["content"])[0])
        fed, whole = (statistics.median(runs[k]) for k in ("fed", "whole"))
        spread = {k: f"{min(v) * 1e3:.1f}-{max(v) * 1e3:.1f}" for k, v in runs.items()}
        print(
            f"{label:<14}{len(text):>8}  {fed * 1e3:>8.1f} ms ({spread['fed']:>15})"
            f"  {fed / (len(text) / args.step) * 1e6:>6.1f} us"
            f"  {whole * 1e3:>7.1f} ms ({spread['whole']:>11})  {fed / whole:>6.0f}x"
            f"  [{kind}, {pieces} pieces]"
        )


if __name__ == "__main__":
    main()
