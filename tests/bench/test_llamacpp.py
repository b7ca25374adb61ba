"""llama.cpp beside specllama (`--vs-llamacpp`): its log read as specllama counts tokens, its
binary found or refused in one line, and a fake `llama-speculative-simple` that prints a log
captured from the real one (tests/bench/data/llamacpp/, the command that made it beside it:
llama.cpp built from the sources llama-cpp-python 0.3.36 vendors, the SmolLM2 test models)
parsed into the table, the JSON and the report."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
from html.parser import HTMLParser
from pathlib import Path

import head_models
import pytest
from typer.testing import CliRunner

from specllama.bench import llamacpp
from specllama.bench.llamacpp import LlamaCppUnavailable, find, find_binary, read_log
from specllama.bench.runner import ExternalToolError
from specllama.bench.summary import bench_schema
from specllama.cli.app import app
from specllama.engine.control import HEADS

DATA = Path(__file__).parent / "data" / "llamacpp"
# A real llama.cpp build for the one test that runs it (skipped where there is none): the
# binary's folder, or the build of the sources llama-cpp-python vendors.
REAL_BUILD = Path(os.environ.get("SPECLLAMA_TEST_LLAMACPP", "/tmp/llama-build/bin"))
# What the captured run printed (draft-simple.stderr): 31 decoded tokens, the end-of-generation
# token among them, in 0.914 s, with -n 64; 22 drafted, 20 accepted; a 64-token prompt.
CAPTURED = {"decoded": 31, "seconds": 0.914, "n": 64, "drafted": 22, "accepted": 20, "prompt": 64}
EDIT_PROMPT = (
    '{"id": "edit", "category": "code-editing", "prompt": "Repeat this code exactly:\\n\\n'
    'def add(a, b):\\n    return a + b\\n\\ndef sub(a, b):\\n    return a - b\\n"}\n'
)


def log(decoded: int, seconds: float) -> str:
    # As llama-speculative-simple ends its output (examples/speculative-simple).
    return (
        f"encoded  700 tokens in    2.100 seconds, speed:  333.333 t/s\n"
        f"decoded {decoded:4d} tokens in {seconds:8.3f} seconds, speed: "
        f"{decoded / seconds:8.3f} t/s\n"
        "n_draft   = 48\nn_predict = 12\nn_drafted = 5\nn_accept  = 3\n"
    )


def test_an_answer_that_stopped_leaves_out_the_end_of_generation_token():
    # 11 tokens and the end-of-generation token, in 0.5 s: 22 tokens/s as specllama counts.
    stats = read_log(log(12, 0.5), 128)
    assert stats["n_generated"] == 11 and stats["finish_reason"] == "stop"
    assert stats["tokens_per_s"] == pytest.approx(22.0)
    assert (stats["n_drafted"], stats["n_accepted"], stats["n_prompt"]) == (5, 3, 700)


def test_an_answer_cut_at_the_limit_counts_what_its_loop_asks_for():
    # It stops once past -n: one token past it is its loop's, no end token among them.
    stats = read_log(log(129, 4.3), 128)
    assert stats["n_generated"] == 129 and stats["finish_reason"] == "length"
    assert stats["tokens_per_s"] == pytest.approx(30.0)


def test_tokens_an_ngram_drafter_wrote_past_the_budget_are_not_counted():
    # Its last n-gram draft ignores the budget: 150 decoded for -n 128, in the time of 129.
    stats = read_log(log(150, 4.3), 128)
    assert stats["n_generated"] == 129 and stats["finish_reason"] == "length"
    assert stats["tokens_per_s"] == pytest.approx(30.0)


def test_the_captured_log_of_the_real_tool():
    text = (DATA / "draft-simple.stdout").read_text() + (DATA / "draft-simple.stderr").read_text()
    stats = read_log(text, CAPTURED["n"])
    assert stats["n_generated"] == CAPTURED["decoded"] - 1
    assert stats["tokens_per_s"] == pytest.approx((CAPTURED["decoded"] - 1) / CAPTURED["seconds"])
    assert stats["n_drafted"] == CAPTURED["drafted"] and stats["n_accepted"] == CAPTURED["accepted"]
    assert stats["n_prompt"] == CAPTURED["prompt"]
    with pytest.raises(ExternalToolError, match="no 'decoded N tokens' line"):
        read_log((DATA / "draft-simple.stdout").read_text(), 64)


# -- finding the binary --------------------------------------------------------------------


def script(folder: Path, body: str, name: str = llamacpp.BINARY) -> Path:
    """An executable shell script standing in for the binary."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_found_in_a_folder_a_source_build_or_on_path(tmp_path, monkeypatch):
    direct = script(tmp_path / "brew", "exit 0")
    assert find_binary(tmp_path / "brew") == direct
    assert find_binary(direct) == direct
    built = script(tmp_path / "src" / "build" / "bin", "exit 0")
    assert find_binary(tmp_path / "src") == built
    monkeypatch.setenv("PATH", str(tmp_path / "brew"))
    assert find_binary(None) == direct and find_binary("") == direct
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(LlamaCppUnavailable, match="not on PATH"):
        find_binary(None)
    with pytest.raises(LlamaCppUnavailable, match="no llama-speculative-simple in"):
        find_binary(tmp_path / "nothing")


HELP = "echo '--spec-type --spec-draft-n-max --no-escape'"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("echo 'error while loading shared libraries: libllama.so.0' >&2; exit 127",
         "does not run here: exit 127: error while loading shared libraries: libllama.so.0"),
        ("kill -SEGV $$", "does not run here: killed by SIGSEGV"),
        ("echo '--draft-max N'", "too old for the bench: it has no --spec-type, "
         "--spec-draft-n-max, --no-escape"),
    ],
)  # fmt: skip
def test_a_binary_that_cannot_serve_is_refused_in_one_line(tmp_path, body, message):
    script(tmp_path, body)
    with pytest.raises(LlamaCppUnavailable) as info:
        find(tmp_path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_working_binary_says_its_version(tmp_path):
    version = (DATA / "version.stderr").read_text()
    script(tmp_path, f'[ "$1" = --version ] && {{ printf %s {shlex.quote(version)} >&2; exit 0; }}'
                     f"\n{HELP}")  # fmt: skip
    found = find(tmp_path)
    assert found.version == "0.5.0-dev (build 1, commit 0c1e570)"
    not_executable = tmp_path / "plain" / llamacpp.BINARY
    not_executable.parent.mkdir()
    not_executable.write_text("")
    with pytest.raises(LlamaCppUnavailable, match="does not run here"):
        find(not_executable)


# -- a fake binary printing the real log, through the whole command -----------------------------


def fake_llamacpp(folder: Path, calls: Path) -> Path:
    """A `llama-speculative-simple` that answers --help and --version as the real one did and
    every run with the captured log; it records each run's arguments and the prompt it read."""
    folder.mkdir(parents=True)
    path = folder / llamacpp.BINARY
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "from pathlib import Path\n"
        f"data, calls = Path({str(DATA)!r}), Path({str(calls)!r})\n"
        "args = sys.argv[1:]\n"
        "if args == ['--help']:\n"
        "    sys.stdout.write((data / 'help.stdout').read_text()); sys.exit(0)\n"
        "if args == ['--version']:\n"
        "    sys.stderr.write((data / 'version.stderr').read_text()); sys.exit(0)\n"
        "prompt = Path(args[args.index('-f') + 1]).read_text()\n"
        "with calls.open('a') as f:\n"
        "    f.write(json.dumps({'args': args, 'prompt': prompt}) + '\\n')\n"
        "sys.stdout.write((data / 'draft-simple.stdout').read_text())\n"
        "sys.stderr.write((data / 'draft-simple.stderr').read_text())\n"
    )
    path.chmod(0o755)
    return folder


class Cells(HTMLParser):
    """The text of each cell of the report's runs table, by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.in_runs = self.in_cell = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.in_runs = dict(attrs).get("id") == "runs-table"
        elif tag == "tr" and self.in_runs and "data-run" in dict(attrs):
            self.rows.append([])
        elif tag == "td" and self.in_runs and self.rows:
            self.in_cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        if tag == "td":
            self.in_cell = False
        elif tag == "table":
            self.in_runs = False

    def handle_data(self, data):
        if self.in_cell:
            self.rows[-1][-1] += data


@pytest.mark.slow
def test_llamacpp_beside_specllama_from_its_real_log(
    smol_f32, smol_q4, tmp_path, monkeypatch, validate
):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    prompts = tmp_path / "edit.jsonl"
    prompts.write_text(EDIT_PROMPT)
    calls = tmp_path / "calls.jsonl"
    folder = fake_llamacpp(tmp_path / "llama.cpp" / "bin", calls)
    out, page = tmp_path / "bench.json", tmp_path / "bench.html"
    result = CliRunner().invoke(
        app,
        [
            "bench", "--target", str(smol_f32), "--draft", str(smol_q4),
            "--prompts", str(prompts), "--configs", "target,model:2", "-n", "64",
            "--no-warmup", "--threads", "2", "--vs-llamacpp", str(folder.parent),
            "--json", str(out), "--report", str(page),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert validate(report, bench_schema()) == []
    assert report["tools"]["llama.cpp"]["version"] == "0.5.0-dev (build 1, commit 0c1e570)"
    theirs = {r["config"]: r for r in report["runs"] if r["config"].startswith("llama.cpp")}
    assert set(theirs) == {"llama.cpp model:2", "llama.cpp ngram-simple", "llama.cpp ngram-mod"}
    run = theirs["llama.cpp model:2"]
    tokens = CAPTURED["decoded"] - 1  # counted as specllama counts: no end-of-generation token
    assert run["n_generated"] == tokens and run["finish_reason"] == "stop"
    assert run["tokens_per_s"] == pytest.approx(tokens / CAPTURED["seconds"])
    assert (run["n_drafted"], run["n_accepted"]) == (CAPTURED["drafted"], CAPTURED["accepted"])
    # In the table beside ours, at its tokens/s, and paired with our target alone's round.
    row = next(line for line in result.stdout.splitlines() if "llama.cpp model:2" in line)
    assert f"{tokens / CAPTURED['seconds']:.1f}" in row
    target = next(r for r in report["runs"] if r["config"] == "target" and r["repeat"] == 0)
    [summary] = [r for r in report["summary"]
                 if r["config"] == "llama.cpp model:2" and r["category"] == "all"]  # fmt: skip
    assert summary["speedup"]["median"] == pytest.approx(
        run["tokens_per_s"] / target["tokens_per_s"], abs=1e-4
    )
    # What it was given: the draft model at our fixed length, the same budget and threads, the
    # prompt whole (as the real tool echoed it when the log was captured) and not unescaped.
    draft_call = next(json.loads(line) for line in calls.read_text().splitlines()
                      if "draft-simple" in line)  # fmt: skip
    args = draft_call["args"]
    assert args[args.index("-md") + 1] == str(smol_q4)
    assert args[args.index("--spec-draft-n-max") + 1] == "2"
    assert args[args.index("-n") + 1] == "64" and args[args.index("-t") + 1] == "2"
    assert "--no-escape" in args
    echoed = (DATA / "draft-simple.stdout").read_text()
    assert draft_call["prompt"].endswith("\n\n")  # one newline more: -f drops one
    assert echoed.startswith("\n\n" + draft_call["prompt"][:-1])
    # The report carries the same numbers.
    cells = Cells()
    cells.feed(page.read_text())
    by_config = {row[0]: row for row in cells.rows}
    assert by_config["llama.cpp model:2"][7] == f"{run['tokens_per_s']:.2f}"


@pytest.mark.slow
def test_a_missing_llamacpp_is_one_line_and_the_bench_runs(smol_q4, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "empty"), "/usr/bin", "/bin"]))
    prompts = tmp_path / "edit.jsonl"
    prompts.write_text(EDIT_PROMPT)
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(smol_q4), "--prompts", str(prompts), "--configs", "target",
         "--fixed", "-n", "4", "--no-warmup", "--vs-llamacpp", "--json", str(tmp_path / "b.json")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines()
             if "llama.cpp" in line and "AMX" not in line]  # fmt: skip
    assert lines == [
        "warning: llama.cpp's llama-speculative-simple is not on PATH (install llama.cpp (brew "
        "install llama.cpp), or give its folder: --vs-llamacpp DIR): the bench runs without "
        "llama.cpp"
    ]
    assert "specllama bench" in result.stdout  # the rest ran
    report = json.loads((tmp_path / "b.json").read_text())
    assert report["tools"] == {} and {c["tool"] for c in report["configs"]} == {"specllama"}


def test_a_missing_folder_is_said_before_anything_loads(tmp_path):
    result = CliRunner().invoke(
        app,
        ["bench", "--vs-llamacpp", str(tmp_path / "nowhere"), "--target",
         str(tmp_path / "missing.gguf"), "--configs", "target"],
    )  # fmt: skip
    first = result.stderr.splitlines()[0]
    assert first.startswith("warning: no llama-speculative-simple in") and "nowhere" in first
    assert result.exit_code != 0 and "Traceback" not in result.output


# -- draft heads in their own file ---------------------------------------------------------


@pytest.mark.parametrize("kind", HEADS)
def test_every_head_kind_has_a_spec_type_the_real_tool_lists(kind):
    spec_types = next(line for line in (DATA / "help.stdout").read_text().splitlines()
                      if line.startswith("--spec-type "))  # fmt: skip
    assert llamacpp.HEAD_SPEC_TYPES[kind] in spec_types.split()[1].split(",")


def head_bench(tmp_path: Path, folder: Path, configs: str) -> tuple[dict, Path]:
    """The bench of the tiny synthetic target with its EAGLE-3 head, llama.cpp from `folder`."""
    head = head_models.tiny_eagle3(0.8)
    prompts = tmp_path / "edit.jsonl"
    prompts.write_text(EDIT_PROMPT)
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(head_models.tiny_target()), "--draft", str(head), "--prompts",
         str(prompts), "--configs", configs, "-n", "48", "--no-warmup", "--threads", "2",
         "--vs-llamacpp", str(folder), "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), head


@pytest.mark.slow
def test_llamacpp_drafts_with_the_same_head_file(tmp_path, monkeypatch, validate):
    """A head from its own file: llama.cpp is given it as its draft model, with the spec type of
    its kind, at the length of our fixed configuration."""
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    calls = tmp_path / "calls.jsonl"
    folder = fake_llamacpp(tmp_path / "llama.cpp" / "bin", calls)
    report, head = head_bench(tmp_path, folder, "target,eagle3:3,adaptive")
    assert validate(report, bench_schema()) == []
    theirs = {c["name"]: c for c in report["configs"] if c["tool"] == "llama.cpp"}
    assert set(theirs) == {"llama.cpp eagle3:3", "llama.cpp ngram-simple", "llama.cpp ngram-mod"}
    assert theirs["llama.cpp eagle3:3"]["drafter"] == "eagle3"
    [args] = [json.loads(line)["args"] for line in calls.read_text().splitlines()
              if "-md" in json.loads(line)["args"]]  # fmt: skip
    assert args[args.index("-md") + 1] == str(head)
    assert args[args.index("--spec-type") + 1] == "draft-eagle3"
    assert args[args.index("--spec-draft-n-max") + 1] == "3"
    assert args[args.index("-m") + 1] == str(head_models.tiny_target())


@pytest.mark.slow
@pytest.mark.skipif(not (REAL_BUILD / llamacpp.BINARY).is_file(), reason="no llama.cpp build")
def test_the_real_llamacpp_runs_the_head_and_accepts_as_often(tmp_path, monkeypatch):
    """The real tool on the same synthetic files (a few seconds): it reads the prompt as we do,
    drafts with the head, and keeps about as many of its drafts as specllama does."""
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    report, _ = head_bench(tmp_path, REAL_BUILD, "target,eagle3:3")
    assert report["notices"] == []  # no run of its was left out
    runs = {r["config"]: r for r in report["runs"]}
    ours, theirs = runs["eagle3:3"], runs["llama.cpp eagle3:3"]
    assert ours["equals_target"] and theirs["n_drafted"] > 0
    assert theirs["acceptance_rate"] == pytest.approx(ours["acceptance_rate"], abs=0.1)
