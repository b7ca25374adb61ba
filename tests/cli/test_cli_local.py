"""The models already on this machine, from the command line: `models --local`, refs of other
tools' stores wherever a model is accepted, `--draft auto`; real models in fake stores."""

from __future__ import annotations

import json
from pathlib import Path

import head_models
import pytest
from store_fakes import place, snapshot
from typer.testing import CliRunner

from specllama.cli.app import app
from specllama.models import ollama

pytestmark = pytest.mark.slow


def invoke(*args: str, input: str | None = None):
    # Wide enough that no REF is folded across lines of a table.
    return CliRunner().invoke(app, [str(a) for a in args], input=input, env={"COLUMNS": "300"})


def one_error_line(result, code: int, fragment: str) -> str:
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.output
    return lines[0]


def local_json(*extra: str) -> dict:
    result = invoke("models", "--local", "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_listing_finds_every_store_pairs_them_and_reports_damage(stocked_machine):
    data = local_json("--dir", stocked_machine["mine"])
    refs = {m["ref"]: m for m in data["models"]}
    roles = stocked_machine
    assert set(refs) == {roles[r] for r in ("q4", "f32", "draft4", "draft2", "bad_vocab")}
    assert refs[roles["bad_vocab"]]["vocab_group"] != refs[roles["f32"]]["vocab_group"]
    assert refs[roles["q4"]]["quant"] == "Q4_1" and refs[roles["q4"]]["vocab"]["n_vocab"] == 49152
    pairs = [(p["target"], p["draft"]) for p in data["pairs"]]
    assert pairs == [(roles["f32"], roles[d]) for d in ("q4", "draft2", "draft4")]
    assert len(data["problems"]) == 4  # dangling digest, not a GGUF twice, truncated


def test_the_listing_as_tables(stocked_machine):
    result = invoke("models", "--local")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for role in ("q4", "f32", "draft4", "draft2", "bad_vocab"):
        assert stocked_machine[role] in out
    assert "skipped ollama:notgguf:latest: cannot read the GGUF header: not a GGUF file" in out
    assert f"--target {stocked_machine['f32']} --draft {stocked_machine['q4']}" in out


def test_no_store_at_all_is_said_not_failed(bare_machine):
    result = invoke("models", "--local")
    assert result.exit_code == 0, result.output
    assert "no GGUF models found" in result.stdout


def run_json(*args: str) -> dict:
    result = invoke("run", "Name three fruits.", "-n", "16", "--json", "--fixed", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_run_by_ollama_name_gives_what_the_same_file_gives_by_path(
    stocked_machine, smol_f32, smol_q4
):
    by_name = run_json("--target", stocked_machine["f32"], "--draft", stocked_machine["q4"])
    by_path = run_json("--target", smol_f32, "--draft", smol_q4)
    alone = run_json("--target", stocked_machine["f32"], "--drafter", "none")
    assert by_name["text"] and by_name["text"] == by_path["text"] == alone["text"]
    assert by_name["n_generated"] == by_path["n_generated"]
    assert by_name["n_drafted"] > 0


def test_lm_studio_and_hugging_face_refs_work_where_a_model_is_accepted(
    stocked_machine, smol_draft
):
    lm = run_json("--target", stocked_machine["draft4"], "--drafter", "none")
    assert lm["text"] == run_json("--target", smol_draft, "--drafter", "none")["text"]
    hf = run_json("--target", stocked_machine["draft2"], "--drafter", "none")
    assert hf["n_generated"] > 0


def test_draft_auto_picks_the_best_draft_found(stocked_machine):
    result = invoke(
        "run", "Name three fruits.", "-n", "16", "--json", "--fixed",
        "--target", stocked_machine["f32"], "--draft", "auto",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"--draft auto: {stocked_machine['q4']}" in " ".join(result.stderr.split())
    alone = run_json("--target", stocked_machine["f32"], "--drafter", "none")
    assert json.loads(result.stdout)["text"] == alone["text"]


def test_draft_auto_without_a_compatible_draft_is_one_clear_line(stocked_machine):
    result = invoke("run", "Hi", "--target", stocked_machine["bad_vocab"], "--draft", "auto")
    one_error_line(result, 1, "has a vocabulary compatible with")


def test_an_unknown_ollama_name_is_one_line_naming_close_ones(stocked_machine):
    result = invoke("run", "Hi", "--target", "ollama:smollm2:135m")
    line = one_error_line(result, 1, "no Ollama model smollm2:135m")
    assert "ollama:smollm2:135m-q4" in line


def test_a_bad_ollama_name_is_a_usage_error(stocked_machine):
    one_error_line(invoke("run", "Hi", "--target", "ollama:a/b/c/d"), 2, "bad Ollama model name")


def test_bench_takes_an_ollama_name(stocked_machine):
    result = invoke(
        "bench", "--target", stocked_machine["f32"], "--draft", stocked_machine["q4"],
        "--configs", "target,model:2", "--limit", "1", "--repeats", "1", "--no-warmup",
        "-n", "8", "--fixed",
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def test_saved_folders_from_the_command_line(bare_machine, tmp_path, smol_q4):
    from store_fakes import place

    folder = tmp_path / "saved"
    place(smol_q4, folder / "sub" / "m.gguf")
    assert local_json()["models"] == []
    assert invoke("models", "--add-dir", folder, "--json").exit_code == 0
    assert [m["path"] for m in local_json()["models"]] == [str(folder / "sub" / "m.gguf")]
    assert invoke("models", "--remove-dir", folder).exit_code == 0
    assert local_json()["models"] == []
    one_error_line(invoke("models", "--remove-dir", folder), 2, "is not a saved model folder")
    one_error_line(invoke("models", "--add-dir", tmp_path / "nope"), 2, "is not a folder")


def test_listing_and_running_write_nothing_into_other_tools_stores(stocked_machine, tmp_path):
    home = Path.home()
    stores = [home / ".ollama", tmp_path / "lm-home", tmp_path / "lm-models",
              home / ".cache" / "huggingface", home / ".cache" / "llama.cpp"]  # fmt: skip
    before = [snapshot(s) for s in stores]
    local_json("--dir", stocked_machine["mine"])
    run_json("--target", stocked_machine["f32"], "--draft", "auto")
    assert [snapshot(s) for s in stores] == before
    assert ollama.stores() == [Path.home() / ".ollama" / "models"]


def test_serve_names_a_model_of_another_tool_by_its_name_there(tmp_path):
    from specllama.cli.loading import served_name

    blob = tmp_path / "sha256-0123"
    assert served_name("ollama:qwen2.5-coder:1.5b", blob) == "qwen2.5-coder:1.5b"
    assert (
        served_name("lmstudio:bartowski/Qwen-GGUF/q4.gguf", blob) == "bartowski/Qwen-GGUF/q4.gguf"
    )
    assert served_name(str(tmp_path / "m.gguf"), tmp_path / "m.gguf") == "m.gguf"


def mtp_folder(tmp_path: Path) -> Path:
    """A Qwen3.5-shaped model with its MTP layer, one without, and a Gemma 4 assistant (under a
    name that does not start with mtp-, so it is read and not skipped by name)."""
    from gguf_fakes import vocab, write_gguf

    folder = tmp_path / "mtp-models"
    folder.mkdir()
    tokens = vocab(300)
    write_gguf(folder / "with-head.gguf", tokens, arch="qwen35",
               extra={"qwen35.nextn_predict_layers": 1},
               tensors={"token_embd.weight": (300, 64)})  # fmt: skip
    write_gguf(folder / "plain.gguf", tokens, arch="qwen35")
    write_gguf(folder / "gemma-assistant.gguf", tokens, arch="gemma4-assistant",
               extra={"gemma4-assistant.nextn_predict_layers": 4})  # fmt: skip
    return folder


def test_the_listing_marks_the_models_with_their_own_draft_head(bare_machine, tmp_path):
    folder = mtp_folder(tmp_path)
    data = local_json("--dir", folder)
    models = {Path(m["path"]).name: m for m in data["models"]}
    assert set(models) == {"with-head.gguf", "plain.gguf"}
    assert models["with-head.gguf"]["mtp"] is True and models["with-head.gguf"]["n_nextn"] == 1
    assert models["plain.gguf"]["mtp"] is False and models["plain.gguf"]["n_nextn"] == 0
    (skipped,) = [p for p in data["problems"] if p["where"].endswith("gemma-assistant.gguf")]
    assert "an assistant draft head, and no model here" in skipped["reason"]
    table = invoke("models", "--local", "--dir", folder)
    assert table.exit_code == 0, table.output
    out = " ".join(table.stdout.split())
    assert "MTP" in out and "yes (1 layer)" in out
    assert f"--target {folder / 'with-head.gguf'} --drafter mtp" in out


def test_a_listing_without_mtp_models_has_no_mtp_column(bare_machine, tmp_path):
    from gguf_fakes import vocab, write_gguf

    write_gguf(tmp_path / "plain.gguf", vocab(300), arch="qwen35")
    table = invoke("models", "--local", "--dir", tmp_path)
    assert table.exit_code == 0, table.output
    assert "MTP" not in table.stdout and "--drafter mtp" not in table.stdout


def test_doctor_names_the_local_models_with_their_own_draft_head(bare_machine, tmp_path):
    doctor = CliRunner().invoke(app, ["doctor", "--json"])
    assert doctor.exit_code == 0, doctor.output
    assert json.loads(doctor.stdout)["mtp_models"] == []
    assert "no local model carries its own" in invoke("doctor").stdout
    folder = mtp_folder(tmp_path)
    assert invoke("models", "--add-dir", folder, "--json").exit_code == 0
    data = json.loads(CliRunner().invoke(app, ["doctor", "--json"]).stdout)
    assert data["mtp_models"] == [str(folder / "with-head.gguf")]  # not the assistant
    table = " ".join(invoke("doctor").stdout.split())
    assert "MTP draft heads" in table and "1 local model(s) carry their own" in table
    assert "with-head.gguf" in table and "--drafter mtp" in table
    # And whether this build can run them (the tested llama-cpp-python can).
    assert data["mtp_missing"] is None and "this build runs them" in table


def test_doctor_says_what_a_build_lacks_for_mtp_heads(bare_machine, monkeypatch):
    from specllama.cli import app as app_module

    missing = "this llama-cpp-python (0.3.30) cannot run MTP heads (missing load_mtp)"
    monkeypatch.setattr(app_module, "mtp_support", lambda: missing)
    assert json.loads(invoke("doctor", "--json").stdout)["mtp_missing"] == missing
    assert "missing load_mtp" in " ".join(invoke("doctor").stdout.split())


@pytest.mark.parametrize(("kind", "name"), [("eagle3", "EAGLE-3"), ("dflash", "DFlash")])
def test_doctor_says_whether_this_build_runs_heads_of_each_kind(
    bare_machine, monkeypatch, kind, name
):
    from specllama.cli import app as app_module

    assert json.loads(invoke("doctor", "--json").stdout)[f"{kind}_missing"] is None
    assert f"{name} heads (--draft HEAD) this build runs them" in " ".join(
        invoke("doctor").stdout.split()
    )
    missing = f"this llama-cpp-python cannot run {name} heads (missing target layer ids)"
    monkeypatch.setattr(app_module, f"{kind}_support", lambda: missing)
    assert json.loads(invoke("doctor", "--json").stdout)[f"{kind}_missing"] == missing
    assert "(missing target layer ids)" in " ".join(invoke("doctor").stdout.split())


def test_a_head_in_a_folder_is_a_draft_for_its_target_and_measured_as_one(bare_machine, tmp_path):
    folder, alone = tmp_path / "pair", tmp_path / "alone"
    target = place(head_models.tiny_target(), folder / "target.gguf")
    head = place(head_models.tiny_eagle3(0.8), folder / "eagle3-tiny.gguf")
    data = local_json("--dir", folder)
    assert [m["path"] for m in data["models"]] == [str(target)] and data["problems"] == []
    [pair] = data["pairs"]
    assert (pair["target_path"], pair["draft_path"]) == (str(target), str(head))
    assert pair["drafter"] == "eagle3" and pair["speedup"] is None
    table = invoke("models", "--local", "--dir", folder)
    assert "(eagle3 head)" in table.stdout
    assert f"--target {target} --draft {head}" in table.stdout  # run drafts with it as a head
    # --measure probes it as it probes a draft model: with the head drafting, and caches it.
    measured = local_json("--dir", folder, "--measure")
    [pair] = measured["pairs"]
    assert pair["speedup"] > 0
    assert local_json("--dir", folder)["pairs"][0]["speedup"] == pair["speedup"]
    # A head with no model here to draft for is one line.
    place(head_models.tiny_eagle3(0.8), alone / "head.gguf")
    lonely = local_json("--dir", alone)
    assert lonely["pairs"] == [] and lonely["models"] == []
    [line] = lonely["problems"]
    assert line["where"].endswith("head.gguf") and "eagle3 draft head" in line["reason"]


def auto_run(target: Path, *extra: str):
    """`run --draft auto` on `target` (--fixed: the drafter chosen drafts every round): its
    JSON, and its stderr, where --draft auto says what it chose (unwrapped)."""
    result = invoke(
        "run", "Name three fruits.", "-n", "16", "--json", "--fixed", "--target", target,
        "--draft", "auto", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), " ".join(result.stderr.split())


def test_draft_auto_drafts_with_the_head_found_for_the_target(bare_machine, tmp_path):
    folder = tmp_path / "pair"
    target = place(head_models.tiny_target(), folder / "target.gguf")
    head = place(head_models.tiny_eagle3(0.8), folder / "eagle3-tiny.gguf")
    assert invoke("models", "--add-dir", folder).exit_code == 0
    ran, said = auto_run(target)
    assert f"--draft auto: {head} (eagle3 head, " in said and "by the rule of thumb" in said
    assert ran["drafter"] == "eagle3" and ran["n_accepted"] > 0
    assert ran["text"] == run_json("--target", target, "--drafter", "none")["text"]


def test_draft_auto_chooses_what_this_machine_measured_to_pay_most(bare_machine, tmp_path):
    """A head and n-gram lookup for one target: the rule of thumb takes the head; measured, the
    one that measured best, whichever it is; and n-gram lookup, when measured best, drafts with
    no draft file loaded."""
    from specllama.bench import pair_probe
    from specllama.cli.local_cmd import probe_settings

    folder = tmp_path / "pair"
    target = place(head_models.tiny_target(), folder / "target.gguf")
    head = place(head_models.tiny_eagle3(0.0), folder / "eagle3-wrong.gguf")
    assert invoke("models", "--add-dir", folder).exit_code == 0
    alone = run_json("--target", target, "--drafter", "none")["text"]
    _, said = auto_run(target)
    assert f"--draft auto: {head}" in said and "by the rule of thumb" in said
    measured = local_json("--measure")
    [pair], [model] = measured["pairs"], measured["models"]
    speedups = {"eagle3": pair["speedup"], "ngram": model["ngram_speedup"]}
    assert model["mtp_speedup"] is None and None not in speedups.values()
    best = max(speedups, key=speedups.__getitem__)
    ran, said = auto_run(target)
    assert f"measured {speedups[best]:.2f}x, the best of 2 measured here" in said
    assert ran["drafter"] == best and ran["text"] == alone
    # A measurement that favours n-gram lookup (as --measure caches one): no draft file.
    news = pair_probe.Measurement(speedups["eagle3"] + 0.5, 0, 0.9, 100.0, 0.0, rounds_drafted=0.5)
    pair_probe.save(target, "ngram", probe_settings(), news)
    ran, said = auto_run(target)
    chosen = "--draft auto: n-gram lookup, no draft model (--drafter ngram; measured"
    assert f"{chosen} {news.speedup:.2f}x, the best of 2 measured here)" in said
    assert ran["drafter"] == "ngram" and ran["text"] == alone
    # Asked for a head, --draft auto still finds the head.
    ran, said = auto_run(target, "--drafter", "eagle3")
    assert f"--draft auto: {head} (eagle3 head, " in said and ran["drafter"] == "eagle3"


def test_draft_auto_weighs_the_targets_own_mtp_head_by_what_was_measured(
    bare_machine, tmp_path, qwen35_mtp
):
    folder = tmp_path / "mtp"
    target = place(qwen35_mtp, folder / "qwen35.gguf")
    assert invoke("models", "--add-dir", folder).exit_code == 0
    ran, said = auto_run(target)  # no draft model here: before, --draft auto had none to offer
    assert "--draft auto: the target's own MTP head (--drafter mtp; by the rule of thumb)" in said
    assert ran["drafter"] == "mtp" and ran["n_drafted"] > 0
    # A head whose headers pair it with this target, but which reads a layer it lacks: the
    # probe cannot load it, says so, and remembers it.
    place(head_models.tiny_eagle3(0.8), folder / "eagle3-tiny.gguf")
    result = invoke("models", "--local", "--json", "--measure")
    assert result.exit_code == 0, result.output
    assert "reads layer 2 of its target; qwen35.gguf has 2 layers" in " ".join(
        result.stderr.split()
    )
    listed = json.loads(result.stdout)
    [model], [pair] = listed["models"], listed["pairs"]
    assert pair["drafter"] == "eagle3" and pair["speedup"] == 0
    assert "cannot run" in invoke("models", "--local").stdout
    # --measure measured the MTP head and n-gram lookup alone; --draft auto takes the better,
    # never the head that cannot run.
    measured = {"mtp": model["mtp_speedup"], "ngram": model["ngram_speedup"]}
    best = max(measured, key=measured.__getitem__)
    ran, said = auto_run(target)
    assert f"(--drafter {best}; measured {measured[best]:.2f}x, the best of 2" in said
    assert ran["drafter"] == best
    table = " ".join(invoke("models", "--local").stdout.split())
    assert f"yes (1 layer), {measured['mtp']:.2f}x" in table


@pytest.fixture
def no_sibling_machine(bare_machine, tmp_path, smol_f32, smol_q4_bad_vocab, spm_vocab_tiny):
    """A target with no draft of its own vocabulary here: a small byte-level BPE model of
    another vocabulary (the Q4_1 weights, one token's text changed), and a SentencePiece one."""
    folder = tmp_path / "no-sibling"
    place(smol_f32, folder / "target.gguf")
    place(smol_q4_bad_vocab, folder / "other-vocab.gguf")
    place(spm_vocab_tiny, folder / "sentencepiece.gguf")
    return folder


def test_a_draft_of_another_vocabulary_is_proposed_across_tokenizers(no_sibling_machine, smol_q4):
    folder = no_sibling_machine
    pairs = local_json("--dir", folder)["pairs"]
    assert [(Path(p["target"]).name, Path(p["draft"]).name) for p in pairs] == [
        ("target.gguf", "other-vocab.gguf")  # the SentencePiece one cannot give its text back
    ]
    assert pairs[0]["across_tokenizers"] is True and pairs[0]["drafter"] == "model"
    shown = invoke("models", "--local", "--dir", folder)
    assert shown.exit_code == 0, shown.output
    assert "other-vocab.gguf (across tokenizers)" in shown.stdout
    # A draft of the target's own vocabulary arrives: it drafts, and none across tokenizers.
    place(smol_q4, folder / "same-vocab.gguf")
    pairs = local_json("--dir", folder)["pairs"]
    assert [(Path(p["draft"]).name, p["across_tokenizers"]) for p in pairs] == [
        ("same-vocab.gguf", False)
    ]


def test_draft_auto_takes_a_draft_across_tokenizers_only_once_measured_to_pay(no_sibling_machine):
    from specllama.bench import pair_probe
    from specllama.cli.local_cmd import probe_settings

    folder = no_sibling_machine
    target, draft = folder / "target.gguf", folder / "other-vocab.gguf"
    assert invoke("models", "--local", "--add-dir", folder).exit_code == 0  # where run looks
    args = ["run", QUESTION, "-n", "12", "--json", "--fixed", "--target", target]
    unmeasured = invoke(*args, "--draft", "auto")
    one_error_line(unmeasured, 1, "has a vocabulary compatible with")
    paying = pair_probe.Measurement(1.3, 3, 0.8, 20.0, 0.2)
    pair_probe.save(target, draft, probe_settings(), paying)
    chosen = invoke(*args, "--draft", "auto")
    assert chosen.exit_code == 0, chosen.output
    said = " ".join(chosen.stderr.split())
    assert f"--draft auto: {draft} (across tokenizers, " in said and "measured 1.30x" in said
    alone = invoke(*args, "--drafter", "none")
    assert json.loads(chosen.stdout)["text"] == json.loads(alone.stdout)["text"]
    assert json.loads(chosen.stdout)["n_drafted"] > 0


QUESTION = "Write a Python function that calls print() twice."
