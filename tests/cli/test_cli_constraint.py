"""`specllama run --json-schema FILE` / `--grammar FILE` in pipes, on real models: the answer
satisfies the rule, and it is the constrained target's own text with every drafter and draft
length (greedy and seeded); bad files and rules are one clear line and an exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "likes": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "mood": {"enum": ["happy", "sad", "calm"]},
    },
    "required": ["name", "age", "likes", "mood"],
    "additionalProperties": False,
}
ASK = "Describe Alice, 31, who likes chess and tea, as JSON."
YES_NO_GBNF = 'root ::= ("yes" | "no") ", because " [a-z ]+ "."\n'
# llguidance's Lark: a rule whose body is a JSON Schema, after a fixed lead-in.
LARK = 'start: "Answer: " answer\nanswer: %json { "type": "integer", "minimum": 0 }\n'


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rules")
    (folder / "person.json").write_text(json.dumps(PERSON))
    (folder / "yes_no.gbnf").write_text(YES_NO_GBNF)
    (folder / "count.lark").write_text(LARK)
    (folder / "broken.json").write_text('{"type": "object",')
    (folder / "list.json").write_text("[1, 2]")
    (folder / "nonsense.json").write_text('{"type": "nonsense"}')
    (folder / "empty_range.json").write_text('{"type": "integer", "minimum": 5, "maximum": 1}')
    (folder / "nothing.gbnf").write_text('root ::= root "a"\n')  # no way to end
    (folder / "unsatisfiable.lark").write_text(
        'start: %json {"type": "string", "minLength": 3, "maxLength": 1}\n'
    )
    (folder / "bad_syntax.gbnf").write_text("root ::= ( unclosed\n")
    (folder / "latin1.json").write_bytes('{"title": "café"}'.encode("latin-1"))
    return folder


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One calibration cache for the module's adaptive runs (not the user's)."""
    return {"SPECLLAMA_CACHE": str(tmp_path_factory.mktemp("cache"))}


def specllama(*args: str, env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specllama", *args],
        input=stdin,
        capture_output=True,
        timeout=300,
        env={**os.environ, **env},
    )


def answer(*args: str, env: dict[str, str]) -> dict:
    done = specllama("run", *args, "--json", "--threads", "2", env=env)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def check_person(text: str) -> None:
    record = json.loads(text)
    assert set(record) == set(PERSON["required"])
    assert isinstance(record["name"], str) and type(record["age"]) is int
    assert all(isinstance(x, str) for x in record["likes"]) and len(record["likes"]) <= 3
    assert record["mood"] in PERSON["properties"]["mood"]["enum"]


def error_lines(stderr: bytes) -> list[str]:
    lines = stderr.decode().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("warning:")]


@pytest.fixture(scope="module")
def person_run(smol_f32: Path, files: Path) -> list[str]:
    return [ASK, "-t", str(smol_f32), "-n", "64", "--json-schema", str(files / "person.json")]


@pytest.fixture(scope="module")
def alone(person_run: list[str], cache: dict[str, str]) -> dict:
    return answer(*person_run, "--drafter", "none", env=cache)


def test_the_answer_is_json_that_satisfies_the_schema(alone: dict):
    check_person(alone["text"])
    assert alone["finish_reason"] == "stop"  # the schema ended it, not the token limit
    assert alone["n_forced"] == 0  # the target alone drafts nothing, not even forced tokens


@pytest.mark.parametrize(
    "how",
    [
        ["--drafter", "ngram"],
        ["--draft", "DRAFT"],  # the adaptive default with the draft model
        *[["--draft", "DRAFT", "--fixed", "--draft-max", str(k)] for k in range(1, 7)],
    ],
    ids=["ngram", "draft-adaptive", *[f"draft-fixed-{k}" for k in range(1, 7)]],
)
def test_greedy_text_is_the_target_alones_with_every_drafter(
    how, person_run, alone, smol_draft: Path, cache
):
    args = [str(smol_draft) if a == "DRAFT" else a for a in how]
    result = answer(*person_run, *args, env=cache)
    assert result["text"] == alone["text"]
    assert result["n_forced"] > 0  # keys, quotes and braces drafted without a model
    assert result["n_generated"] == alone["n_generated"]


def test_a_seed_gives_the_same_constrained_text_with_every_drafter(
    person_run, smol_draft: Path, cache
):
    sampled = [*person_run, "--temperature", "0.8", "--seed", "7"]
    texts = {
        answer(*sampled, *how, env=cache)["text"]
        for how in (
            ["--drafter", "none"],
            ["--drafter", "ngram"],
            ["--draft", str(smol_draft), "--fixed", "--draft-max", "3"],
        )
    }
    [text] = texts
    check_person(text)


def test_a_gbnf_grammar_and_a_lark_grammar(smol_f32: Path, files: Path, cache):
    model = ["-t", str(smol_f32), "-n", "40", "--drafter", "ngram"]
    said = answer("Is the sky blue?", *model, "--grammar", str(files / "yes_no.gbnf"), env=cache)
    head, _, reason = said["text"].partition(", because ")
    assert head in ("yes", "no") and reason.endswith(".") and said["finish_reason"] == "stop"
    counted = answer(
        "How many legs has a cat?", *model, "--grammar", str(files / "count.lark"), env=cache
    )
    assert counted["text"].startswith("Answer: ")
    assert int(counted["text"].removeprefix("Answer: ")) >= 0


def test_plain_output_is_the_bare_json(person_run, alone, cache):
    done = specllama("run", *person_run, "--drafter", "none", "--threads", "2", env=cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == alone["text"] + "\n"  # pipes straight into jq


def test_chat_answers_every_turn_under_the_schema(smol_f32: Path, files: Path, cache, tmp_path):
    lines = f"{ASK}\nNow Bob, 45, who likes hiking.\n/exit\n".encode()
    done = specllama(
        "chat",
        *["-t", str(smol_f32), "--drafter", "ngram", "-n", "64", "--threads", "2"],
        *["--json-schema", str(files / "person.json")],
        stdin=lines,
        env={**cache, "XDG_STATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    # Off a terminal each answer follows the ">>> " prompt on its line.
    lines = done.stdout.decode().splitlines()
    answers = [line[line.index("{") :] for line in lines if line.startswith(">>> {")]
    assert len(answers) == 2
    for text in answers:
        check_person(text)


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--json-schema", "missing.json"], 2, "--json-schema {dir}/missing.json: no such file"),
        (["--json-schema", "."], 2, "--json-schema {dir} is a folder, not a file"),
        (["--grammar", "latin1.json"], 2, "--grammar {dir}/latin1.json is not UTF-8 text"),
        (["--json-schema", "broken.json"], 2, "--json-schema {dir}/broken.json is not JSON:"),
        (["--json-schema", "list.json"], 2, "--json-schema {dir}/list.json is not a JSON Schema"),
        (
            ["--json-schema", "person.json", "--grammar", "yes_no.gbnf"],
            2,
            "--json-schema and --grammar exclude each other",
        ),
        (["--json-schema", "nonsense.json"], 1, "the JSON Schema cannot be compiled"),
        (["--json-schema", "empty_range.json"], 1, "the JSON Schema cannot be compiled"),
        (["--grammar", "nothing.gbnf"], 1, "the gbnf grammar admits no text at all"),
        (["--grammar", "bad_syntax.gbnf"], 1, "the gbnf grammar cannot be read"),
        # llguidance's message has the grammar dumped under it: only its first line is said.
        (["--grammar", "unsatisfiable.lark"], 1, "the lark grammar cannot be compiled: at 1(8)"),
    ],
)
def test_a_bad_rule_is_one_clear_line_and_an_exit_code(
    args, code, says, smol_f32: Path, files: Path, cache
):
    paths = [str(files / a) if not a.startswith("--") else a for a in args]
    done = specllama("run", "hi", "-t", str(smol_f32), "--drafter", "none", *paths, env=cache)
    assert done.returncode == code
    assert done.stdout == b""
    [line] = error_lines(done.stderr)
    assert line.startswith("error: " + says.format(dir=files)), line
    assert b"Traceback" not in done.stderr
