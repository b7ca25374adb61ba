"""`specllama bench`: the prompt file format, the configurations, the summary arithmetic, and
an end-to-end run on real tiny models whose JSON is checked against the documented schema
(specllama/data/bench_schema.json) with the small validator of conftest.py (no jsonschema
dependency)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import head_models
import pytest
from typer.testing import CliRunner

from specllama.bench import configs as bench
from specllama.bench import plot as bench_plot
from specllama.bench import report as bench_report
from specllama.bench import runner, summary
from specllama.bench.configs import BenchConfig
from specllama.bench.prompts import BenchPrompt, load_prompts, select_prompts
from specllama.bench.runner import BenchResult, Run
from specllama.chat import Message
from specllama.cli.app import app
from specllama.engine.control import HEADS
from specllama.errors import UsageError


def test_the_validator_catches_violations(validate):
    schema = summary.bench_schema()
    assert validate({"schema": "specllama-bench/1"}, schema)  # most keys missing
    row_schema = schema["properties"]["runs"]["items"]
    assert any("unexpected key" in e for e in validate({"bogus": 1}, row_schema, schema))
    histogram = schema["$defs"]["histogram"]
    assert validate({"x": 1}, histogram, schema)
    assert validate({"1": -1}, histogram, schema)
    assert not validate({"0": 3, "12": 1}, histogram, schema)


# -- prompts ----------------------------------------------------------------------------------


def test_the_bundled_prompt_set():
    prompts = load_prompts()
    assert 28 <= len(prompts) <= 40
    counts = Counter(p.category for p in prompts)
    assert set(counts) == {
        "code-writing",
        "code-editing",
        "summarising",
        "qa",
        "translation",
        "chat",
        "extraction",
        "structured",
    }
    assert min(counts.values()) >= 4
    # The structured-output prompts, and only they, carry a JSON Schema to answer under.
    assert {p.category for p in prompts if p.schema} == {"structured"}
    assert all(json.loads(p.schema)["type"] == "object" for p in prompts if p.schema)
    assert any(len(p.messages) > 1 for p in prompts)  # multi-turn ones too
    assert len({p.id for p in prompts}) == len(prompts)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(text, encoding="utf-8")
    return path


def test_prompt_file_format(tmp_path):
    path = write(
        tmp_path,
        "# a comment\n"
        '{"category": "qa", "prompt": "Why?", "system": "Be brief.", "max_tokens": 5}\n'
        "\n"
        '{"id": "conv", "category": "chat", "messages": [{"role": "user", "content": "Hi"},'
        ' {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "More"}]}\n'
        '{"category": "json", "prompt": "Alice, 31", "schema": {"type": "object"}}\n',
    )
    first, second, third = load_prompts(path)
    assert first.schema is None and json.loads(third.schema) == {"type": "object"}
    assert first.messages == (Message("system", "Be brief."), Message("user", "Why?"))
    assert first.max_tokens == 5 and first.id == "01"
    assert second.id == "conv" and [m.role for m in second.messages] == [
        "user",
        "assistant",
        "user",
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"prompt": "x"}', "`category`"),
        ('{"category": "a"}', "either `prompt` or `messages`"),
        ('{"category": "a", "prompt": "x", "colour": 1}', "unknown key(s) colour"),
        ('{"category": "a", "messages": [{"role": "user", "content": "x"},'
         ' {"role": "assistant", "content": "y"}]}', "last message"),
        ('{"category": "a", "messages": [{"role": "robot", "content": "x"}]}', "`role`"),
        ('{"category": "a", "prompt": "x", "max_tokens": 0}', "`max_tokens`"),
        ('{"category": "a", "prompt": "x", "schema": "an object"}', "`schema` must be a JSON"),
    ],
)  # fmt: skip
def test_prompt_file_errors_name_the_line(tmp_path, line, message):
    path = write(tmp_path, '{"category": "ok", "prompt": "fine"}\n' + line + "\n")
    with pytest.raises(UsageError, match=re.escape(message)) as info:
        load_prompts(path)
    assert f"{path}:2" in str(info.value)


def test_duplicate_ids_and_empty_files_are_refused(tmp_path):
    with pytest.raises(UsageError, match="used twice"):
        load_prompts(write(tmp_path, '{"id": "a", "category": "c", "prompt": "x"}\n' * 2))
    with pytest.raises(UsageError, match="no prompts"):
        load_prompts(write(tmp_path, "\n# nothing\n"))


# -- configurations ---------------------------------------------------------------------------


def test_prompts_selected_by_category_and_limit():
    prompts = load_prompts()
    edits = select_prompts(prompts, ["code-editing", "qa"], None)
    assert {p.category for p in edits} == {"code-editing", "qa"}
    assert len(edits) == sum(p.category in {"code-editing", "qa"} for p in prompts)
    assert select_prompts(prompts, None, 3) == prompts[:3]
    qa = [p for p in prompts if p.category == "qa"]
    assert select_prompts(prompts, ["qa"], 0) == qa[:1]  # at least one prompt
    with pytest.raises(UsageError, match="no prompts in category poetry"):
        select_prompts(prompts, ["qa", "poetry"], None)


def test_configurations():
    configs = bench.parse_configs(
        "model:2, ngram:8,adaptive", has_draft=True, draft_max=4, adaptive_draft_max=12
    )
    assert [c.name for c in configs] == ["target", "model:2", "ngram:8", "adaptive"]
    assert configs[-1] == BenchConfig("adaptive", "combined", 12, True)
    assert bench.parse_configs("adaptive", has_draft=False, draft_max=4)[1].drafter == "ngram"
    assert [c.name for c in bench.parse_configs("model", has_draft=True, draft_max=3)] == [
        "target",
        "model:3",
    ]
    fixed = bench.parse_configs("ngram:4,adaptive", has_draft=True, draft_max=4, adaptive=False)
    assert [c.name for c in fixed] == ["target", "ngram:4"]
    piped = bench.parse_configs("model:4,pipe:4", has_draft=True, draft_max=4)
    assert piped[2] == BenchConfig("pipe:4", "model", 4, False, pipelined=True)
    assert piped[2].as_dict()["pipelined"] and not piped[1].as_dict()["pipelined"]
    own = bench.parse_configs("mtp:3,adaptive", has_draft=False, has_mtp=True, draft_max=4)
    assert own[1] == BenchConfig("mtp:3", "mtp", 3, False)
    assert own[2].drafter == "combined"  # n-gram lookup beside the head


@pytest.mark.parametrize("kind", HEADS)
def test_a_head_in_its_own_file_has_its_configurations(kind):
    configs = bench.parse_configs(f"{kind}:3,adaptive", has_draft=False, head=kind, draft_max=4)
    assert configs[1] == BenchConfig(f"{kind}:3", kind, 3, False)
    assert configs[2].drafter == "combined"  # n-gram lookup beside the head
    assert bench.parse_configs(kind, has_draft=False, head=kind, draft_max=5)[1].name == f"{kind}:5"
    assert f"{kind}:2" in bench.default_configs(has_draft=False, mtp=False, head=kind)
    # Without that head loaded (none, another kind, a draft model): one line that says how.
    for loaded in {None, *HEADS} - {kind}:
        with pytest.raises(UsageError, match=f"needs a {kind} head") as info:
            bench.parse_configs(f"{kind}:2", has_draft=True, head=loaded, draft_max=4)
        assert f"--drafter {kind}" in (info.value.hint or "")
    # The JSON schema knows the kind as a configuration's drafter.
    drafters = summary.bench_schema()["properties"]["configs"]["items"]["properties"]["drafter"]
    assert kind in drafters["enum"]


def test_default_configurations_follow_what_drafts():
    assert "model:2" in bench.default_configs(has_draft=True, mtp=False)
    assert "mtp:2" in bench.default_configs(has_draft=False, mtp=True)
    only_lookup = bench.default_configs(has_draft=False, mtp=False)
    assert bench.parse_configs(only_lookup, has_draft=False, draft_max=4)[1].name == "ngram:8"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("beam:3", "unknown bench configuration"),
        ("model:x", "must be a number"),
        ("model:0", "at least 1"),
        ("model:2,model:2", "listed twice"),
        ("adaptive:3", "takes no length"),
    ],
)
def test_bad_configurations(spec, message):
    with pytest.raises(UsageError, match=message):
        bench.parse_configs(spec, has_draft=True, draft_max=4)
    for spec in ("model:2", "pipe:2"):
        with pytest.raises(UsageError, match="needs a draft model"):
            bench.parse_configs(spec, has_draft=False, draft_max=4)
    with pytest.raises(UsageError, match="drafting with its own head"):
        bench.parse_configs("mtp:2", has_draft=True, draft_max=4)


# -- the summary ------------------------------------------------------------------------------


def fake_run(config, prompt, category, repeat, tps, drafted=0, accepted=0, equal=True):
    stats = {
        "n_prompt": 10,
        "n_generated": 20,
        "time_s": 20 / tps,
        "tokens_per_s": tps,
        "n_drafted": drafted,
        "n_accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "n_rounds": 10,
        "n_draft_rounds": 5 if drafted else 0,
        "mean_accepted_per_round": accepted / 5 if drafted else 0.0,
        "accepted_histogram": {"2": 5} if drafted else {},
        "target_s": 0.5,
        "draft_s": 0.1,
        "overhead_ms_per_round": 1.0,
        "overhead_s": 0.01,
        "finish_reason": "length",
    }
    return Run(config, prompt, category, repeat, [1, 2], stats, equal, 1.0 if equal else 0.5)


def test_speedups_are_computed_pair_by_pair_and_summarised_by_category():
    configs = [BenchConfig("target", "none", 0, False), BenchConfig("ngram:4", "ngram", 4, False)]
    prompts = [
        BenchPrompt("a", "code", (Message("user", "x"),)),
        BenchPrompt("b", "code", (Message("user", "y"),)),
    ]
    result = BenchResult(settings={}, configs=configs, prompts=prompts)
    # Round 0 ran on a slow moment (both halves slow), round 1 on a fast one: pairing cancels it.
    result.runs = [
        fake_run("target", "a", "code", 0, 10.0),
        fake_run("ngram:4", "a", "code", 0, 20.0, 10, 10),
        fake_run("target", "a", "code", 1, 20.0),
        fake_run("ngram:4", "a", "code", 1, 40.0, 10, 10),
        fake_run("target", "b", "code", 0, 10.0),
        fake_run("ngram:4", "b", "code", 0, 10.0, 10, 0, equal=False),
    ]
    found = summary.summarise(result)
    by_prompt = {p["id"]: p["speedup"] for p in found["prompts"]}
    assert by_prompt["a"] == {"target": 1.0, "ngram:4": 2.0}
    assert by_prompt["b"] == {"target": 1.0, "ngram:4": 1.0}
    [row] = [r for r in found["summary"] if r["config"] == "ngram:4" and r["category"] == "code"]
    assert row["speedup"] == {"median": 1.5, "min": 1.0, "max": 2.0}
    assert row["acceptance_rate"] == pytest.approx(20 / 30, abs=1e-4)
    assert row["mean_accepted_per_round"] == pytest.approx(20 / 15, abs=1e-4)
    assert row["accepted_histogram"] == {"2": 15}
    assert row["equals_target"] == 0.5  # prompt b differed
    assert row["overhead_ms_per_round"] == pytest.approx(1.0)
    assert row["tokens_per_s"] == {"median": 20.0, "min": 10.0, "max": 40.0}
    assert bench_report.histogram_text({"0": 1, "3": 3}) == "0:25 3:75"
    # The target alone ran prompt a at 10 and 20 tok/s: the machine's noise, 100%; b ran once.
    assert found["noise"] == {"median": 1.0, "min": 1.0, "max": 1.0}


def test_the_noise_is_the_target_alones_spread_between_its_own_rounds():
    runs = [
        fake_run("target", "a", "code", 0, 20.0),
        fake_run("target", "a", "code", 1, 22.0),
        fake_run("target", "b", "code", 0, 30.0),
        fake_run("target", "b", "code", 1, 24.0),
        fake_run("ngram:4", "b", "code", 0, 60.0),  # other configurations say nothing of it
        fake_run("target", "c", "code", 0, 5.0),  # one round: no spread to see
    ]
    noise = summary.target_noise(runs)
    assert noise == {"median": pytest.approx(0.175), "min": 0.1, "max": 0.25}
    assert summary.target_noise(runs[-1:]) is None
    settings = {"max_tokens": 8, "repeats": 2, "temperature": 0.0, "n_threads": 2}
    report = {
        "summary": [],
        "settings": settings,
        "models": {"target": {"name": "t"}},
        "noise": noise,
        "prompts": [{"id": p, "category": "code"} for p in "abc"],
        "runs": [r.as_dict() for r in runs],
    }
    caption = str(bench_report.report_table(report).caption)
    assert "3 prompts in 1 category; 6 runs (2 rounds each)" in caption
    assert "were 18% apart (median; up to 25%)" in caption


def test_a_schema_prompt_runs_specllamas_configurations_then_the_target_without_it():
    plan = runner.schedule(
        2, 2, 1, repeats=2, warmup=False, noise_check=False, tokens=[8, 8],
        constrained=[True, False],
    )  # fmt: skip
    first = [(p.kind, p.slot) for p in plan if p.prompt == 0]
    # No other tool's slot (2) on the schema prompt; the free run closes each round.
    assert first == [("run", 0), ("run", 1), ("free", 0), ("run", 1), ("run", 0), ("free", 0)]
    assert sorted(p.slot for p in plan if p.prompt == 1) == [0, 0, 1, 1, 2, 2]


def test_the_constraint_cost_is_time_per_token_with_over_without_the_schema():
    configs = [BenchConfig("target", "none", 0, False), BenchConfig("ngram:4", "ngram", 4, False)]
    prompts = [
        BenchPrompt("json", "structured", (Message("user", "x"),), schema='{"type": "object"}'),
        BenchPrompt("text", "qa", (Message("user", "y"),)),
    ]
    result = BenchResult(settings={}, configs=configs, prompts=prompts)
    result.runs = [
        fake_run("target", "json", "structured", 0, 0.4),  # a stall: 2.5 s a token
        fake_run("target", "json", "structured", 1, 8.0),  # 125 ms
        fake_run("ngram:4", "json", "structured", 0, 30.0),  # not the target alone: not counted
        fake_run("target", "text", "qa", 0, 50.0),  # no schema: no cost to tell
    ]
    result.free_runs = [
        fake_run("target", "json", "structured", 0, 10.0),  # 100 ms
        fake_run("target", "json", "structured", 1, 5.0),  # 200 ms
    ]
    cost = summary.constraint_cost(result)
    [row] = cost["prompts"]
    # Each side's fastest run: the stall says nothing of what the schema costs.
    assert row["id"] == "json" and row["free_ms_per_token"] == pytest.approx(100.0)
    assert row["constrained_ms_per_token"] == pytest.approx(125.0)
    assert row["ratio"] == pytest.approx(1.25)
    # fake_run's loop overhead: 1 ms a round, 10 rounds, 20 tokens; the same on both sides.
    assert row["constrained_overhead_ms_per_token"] == row["free_overhead_ms_per_token"] == 0.5
    assert cost["ratio"]["median"] == row["ratio"]
    line = summary.describe_constraint_cost({"constraint_cost": cost})
    assert line.startswith("JSON Schema: the target alone takes 1.25x its time per token")
    assert summary.constraint_cost(BenchResult(settings={}, configs=configs, prompts=prompts[1:]))\
        is None  # fmt: skip


# -- end to end, on real tiny models ----------------------------------------------------------


@pytest.fixture
def prompt_file(tmp_path: Path) -> Path:
    return write(
        tmp_path,
        '{"id": "edit", "category": "code-editing", "prompt": "Repeat this code exactly:\\n\\n'
        'def add(a, b):\\n    return a + b\\n\\ndef sub(a, b):\\n    return a - b\\n"}\n'
        '{"id": "talk", "category": "chat", "messages": [{"role": "user", "content": "Hi!"},'
        ' {"role": "assistant", "content": "Hello! How can I help?"},'
        ' {"role": "user", "content": "Name a colour."}]}\n',
    )


@pytest.mark.slow
@pytest.mark.own_calibrations  # cached only when trusted
def test_bench_end_to_end_json_follows_the_schema(
    smol_f32, smol_q4, prompt_file, tmp_path, monkeypatch, validate
):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--target", str(smol_f32),
            "--draft", str(smol_q4),
            "--prompts", str(prompt_file),
            "--configs", "target,model:2,pipe:2,ngram:4,adaptive",
            "-n", "12",
            "--repeats", "2",
            "--threads", "2",
            "--json", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "specllama bench" in result.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    assert validate(report, summary.bench_schema()) == []

    names = ["target", "model:2", "pipe:2", "ngram:4", "adaptive"]
    assert [c["name"] for c in report["configs"]] == names
    assert len(report["runs"]) == 2 * 2 * 5  # prompts x repeats x configurations
    assert report["noise"]["min"] >= 0  # the target alone ran every prompt twice
    assert "the target alone's runs of one prompt were" in result.stdout
    assert {r["category"] for r in report["summary"]} == {"code-editing", "chat", "all"}
    assert report["calibration"]["verify_s"]["1"] > 0
    assert report["models"]["draft"]["name"] == Path(smol_q4).name
    # The F32 target is the strict reference: every greedy configuration reproduces it.
    assert all(r["equals_target"] for r in report["runs"])
    model_runs = [r for r in report["runs"] if r["config"] == "model:2"]
    assert sum(r["n_drafted"] for r in model_runs) > 0
    # Cached for next time when it passed the checks (a busy machine fails them: not cached).
    cached = list((tmp_path / "cache" / "calibration").glob("*.json"))
    assert bool(cached) == report["calibration"]["status"]["trusted"]


@pytest.mark.slow
def test_the_quick_bench_drafts_with_a_head_from_its_own_file(tmp_path, monkeypatch, validate):
    """--draft HEAD.gguf alone (its kind found from the file): the quick plan runs the head at
    a fixed length beside the default, and every run writes the target alone's text."""
    target, head = head_models.tiny_target(), head_models.tiny_eagle3(0.8)
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    prompts = write(tmp_path, '{"id": "edit", "category": "code-editing", "prompt": "Hi"}\n')
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(target), "--draft", str(head), "--prompts", str(prompts),
         "-n", "32", "--threads", "2", "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert validate(report, summary.bench_schema()) == []
    [fixed] = [c for c in report["configs"] if c["drafter"] == "eagle3"]
    assert fixed["controller"] == "fixed" and fixed["name"] == f"eagle3:{fixed['draft_max']}"
    assert {c["name"] for c in report["configs"]} >= {"target", fixed["name"], "adaptive"}
    assert report["models"]["draft"]["name"] == head.name
    runs = [r for r in report["runs"] if r["config"] == fixed["name"]]
    assert runs and all(r["equals_target"] for r in report["runs"])
    assert sum(r["n_accepted"] for r in runs) > 0 and sum(r["n_drafted"] for r in runs) > 0


PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "likes": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age", "likes"],
    "additionalProperties": False,
}


@pytest.mark.slow
def test_a_structured_prompt_runs_under_its_schema_with_and_without_speculation(
    smol_f32, smol_q4, tmp_path, monkeypatch, validate
):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    free_text = {"id": "talk", "category": "chat", "prompt": "Name a colour."}
    entry = {
        "id": "person",
        "category": "structured",
        "prompt": "Describe Alice, 31, who likes chess and tea, as JSON.",
        "schema": PERSON_SCHEMA,
    }
    prompt_file = write(tmp_path, f"{json.dumps(free_text)}\n{json.dumps(entry)}\n")
    out, page = tmp_path / "bench.json", tmp_path / "bench.html"
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(smol_f32), "--draft", str(smol_q4), "--prompts",
         str(prompt_file), "--configs", "target,model:3,ngram:4,adaptive", "-n", "40",
         "--no-warmup", "--repeats", "1", "--threads", "2", "--json", str(out),
         "--report", str(page)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert validate(report, summary.bench_schema()) == []
    constrained = {p["id"]: p["constrained"] for p in report["prompts"]}
    assert constrained == {"talk": False, "person": True}
    ruled = [r for r in report["runs"] if r["prompt_id"] == "person"]
    assert {r["config"] for r in ruled} == {"target", "model:3", "ngram:4", "adaptive"}
    # Under the schema every configuration writes the constrained target's text, and the
    # schema, not the token limit, ends it; speculation's figures are there to compare.
    assert all(r["equals_target"] and r["finish_reason"] == "stop" for r in ruled)
    assert sum(r["n_drafted"] for r in ruled if r["config"] == "model:3") > 0
    rows = [r for r in report["summary"] if r["category"] == "structured"]
    assert {r["config"] for r in rows if r["speedup"]} == {r["config"] for r in ruled}
    # What the schema costs: the target alone once more without it, per token.
    [free] = report["free_runs"]
    assert free["prompt_id"] == "person" and free["config"] == "target"
    [cost] = report["constraint_cost"]["prompts"]
    alone = [r for r in ruled if r["config"] == "target"]  # its round and the noise check
    per_token = [1000 * r["time_s"] / r["n_generated"] for r in alone]
    assert cost["constrained_ms_per_token"] == pytest.approx(min(per_token), rel=1e-3)
    assert cost["free_ms_per_token"] == pytest.approx(
        1000 * free["time_s"] / free["n_generated"], rel=1e-3
    )
    assert cost["ratio"] > 0
    assert cost["constrained_overhead_ms_per_token"] > 0 and cost["free_overhead_ms_per_token"] > 0
    assert "JSON Schema: the target alone takes" in result.stdout
    assert "JSON Schema: the target alone takes" in page.read_text()
    assert "structured: every configuration answers under the prompt's JSON Schema" in (
        result.stderr
    )


@pytest.mark.slow
def test_bench_target_only_without_a_draft_model(smol_q4, prompt_file, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(
        app,
        [
            "bench", "--target", str(smol_q4), "--prompts", str(prompt_file),
            "--configs", "ngram:3", "--fixed", "-n", "4", "--repeats", "1", "--no-warmup",
            "--category", "chat",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "ngram:3" in result.stdout


@pytest.mark.slow
def test_bench_takes_a_draft_of_another_vocabulary(
    smol_f32, smol_q4_bad_vocab, prompt_file, tmp_path, monkeypatch, validate
):
    """A draft whose vocabulary differs drafts across tokenizers, beside the target alone:
    every run writes the target alone's text, and the report says how the draft drafts."""
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    out, page = tmp_path / "bench.json", tmp_path / "bench.html"
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(smol_f32), "--draft", str(smol_q4_bad_vocab), "--prompts",
         str(prompt_file), "--full", "--fixed", "--configs", "target,model:3", "-n", "12",
         "--repeats", "1", "--no-warmup", "--threads", "2", "--json", str(out),
         "--report", str(page)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "drafting across tokenizers" in " ".join(result.stderr.split())
    report = json.loads(out.read_text())
    assert validate(report, summary.bench_schema()) == []
    assert report["models"]["draft"]["across_tokenizers"] is True
    runs = [r for r in report["runs"] if r["config"] == "model:3"]
    assert len(runs) == 2 and all(r["equals_target"] for r in report["runs"])
    assert sum(r["n_accepted"] for r in runs) > 0
    assert "(across tokenizers" in " ".join(result.stdout.split())
    assert "across tokenizers (its text re-tokenised)" in page.read_text()


@pytest.mark.slow
def test_bench_with_the_targets_own_head(qwen35_mtp, prompt_file, tmp_path, monkeypatch):
    """A target with MTP layers: bench compares its own head's drafts, identical answers."""
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        app,
        [
            "bench", "--target", str(qwen35_mtp), "--prompts", str(prompt_file), "--fixed",
            "-n", "16", "--repeats", "1", "--no-warmup", "--category", "chat", "--json", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    runs = json.loads(out.read_text())["runs"]
    mtp = [r for r in runs if r["config"].startswith("mtp:")]
    assert mtp and all(r["equals_target"] and r["n_drafted"] for r in mtp)


def test_unknown_category_is_a_usage_error(tmp_path, prompt_file):
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(tmp_path / "missing.gguf"), "--prompts", str(prompt_file),
         "--category", "poetry"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "no prompts in category poetry" in result.output


@pytest.mark.parametrize("option", ["--json", "--report", "--plot"])
def test_an_output_that_cannot_be_written_is_refused_before_any_run(tmp_path, option):
    for where in (tmp_path / "missing" / "out.file", tmp_path):
        result = CliRunner().invoke(
            app, ["bench", "--target", str(tmp_path / "missing.gguf"), option, str(where)]
        )
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines() == [
            f"error: {option} {where}: cannot write a file there "
            "(hint: give a file in a folder you own)"
        ]


def test_plot_without_matplotlib_fails_in_one_line(monkeypatch, prompt_file, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    result = CliRunner().invoke(
        app, ["bench", "--prompts", str(prompt_file), "--plot", str(tmp_path / "p.png")]
    )
    assert result.exit_code == 2
    assert "--plot needs matplotlib" in result.output
    assert "specllama[plot]" in result.output
    assert "Traceback" not in result.output


def test_plot_is_written_when_matplotlib_is_there(tmp_path):
    pytest.importorskip("matplotlib")
    report = {
        "models": {"target": {"name": "t.gguf"}},
        "summary": [
            {"config": c, "category": cat, "speedup": {"median": m, "min": m - 0.1, "max": m}}
            for c, m in (("model:2", 0.9), ("model:4", 0.8), ("ngram:8", 1.4), ("adaptive", 1.5))
            for cat in ("code", "chat", "all")
        ],
    }
    path = tmp_path / "plot.png"
    bench_plot.write_plot(report, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_the_quick_default_plans_from_this_machines_costs(
    smol_f32, smol_q4, prompt_file, tmp_path, monkeypatch, validate
):
    """No --configs, no --repeats: one prompt per category, the fixed configurations the
    calibration picks, one round and the target alone twice; all said in what it prints."""
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    with prompt_file.open("a") as f:
        f.write('{"id": "talk-2", "category": "chat", "prompt": "Name a fruit."}\n')
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(smol_f32), "--draft", str(smol_q4), "--prompts",
         str(prompt_file), "-n", "8", "--threads", "2", "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert validate(report, summary.bench_schema()) == []
    assert report["plan"]["mode"] == "quick"
    assert [p["id"] for p in report["prompts"]] == ["edit", "talk"]  # talk-2 is a second chat
    names = [c["name"] for c in report["configs"]]
    assert names[0] == "target" and names[-1] == "adaptive" and 3 <= len(names) <= 4
    fixed = names[1:-1]
    assert any(n.startswith("model:") for n in fixed) or fixed[0] == "ngram:8"
    assert all(any(note.startswith(f"{n}: ") for note in report["plan"]["notes"]) for n in fixed)
    assert report["settings"]["noise_check"] and report["settings"]["repeats"] == 1
    assert len(report["runs"]) == 2 * (len(names) + 1)  # each prompt once, the target twice
    assert report["noise"] is not None
    n_runs = len(report["runs"])
    assert f"rests on: 2 prompts in 2 categories; {n_runs} runs" in result.stdout
    assert "speedup over the target alone" in result.stdout  # the bars
    assert "one per category" in result.stderr  # why it chose what it chose
