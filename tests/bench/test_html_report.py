"""`--report FILE.html`: a page that parses as HTML, fetches nothing, whose numbers are the
JSON's, and in which text from outside (prompt ids, categories, file names) stays text."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from specllama.bench.configs import BenchConfig
from specllama.bench.html_report import render_html
from specllama.bench.prompts import BenchPrompt
from specllama.bench.runner import BenchResult, Run
from specllama.bench.summary import to_json
from specllama.chat import Message

HOSTILE = '<script>alert("x")</script>&amp;'
VOID = {"meta", "br", "img", "input", "link", "hr"}


def run(config, prompt, category, repeat, tps, drafted=0, accepted=0, ours=True):
    stats = {
        "n_prompt": 10, "n_generated": 20, "time_s": 20 / tps, "tokens_per_s": tps,
        "n_drafted": drafted, "n_accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else 0.0, "finish_reason": "length",
    }  # fmt: skip
    if ours:
        stats.update(n_rounds=10, n_draft_rounds=5 if drafted else 0, target_s=0.5, draft_s=0.1,
                     mean_accepted_per_round=accepted / 5 if drafted else 0.0,
                     accepted_histogram={"2": 5} if drafted else {}, overhead_ms_per_round=1.0,
                     overhead_s=0.01)  # fmt: skip
    return Run(config, prompt, category, repeat, [1, 2] if ours else None, stats,
               True if ours else None, 1.0 if ours else None)  # fmt: skip


@pytest.fixture
def report():
    configs = [
        BenchConfig("target", "none", 0, False),
        BenchConfig("adaptive", "combined", 16, True),
        BenchConfig("llama.cpp ngram-simple", "ngram", None, False, tool="llama.cpp"),
    ]
    prompts = [
        BenchPrompt(HOSTILE, "code", (Message("user", "x"),)),
        BenchPrompt("b", HOSTILE, (Message("user", "y"),)),
    ]
    result = BenchResult(settings={"max_tokens": 20, "repeats": 1, "noise_check": True,
                                   "temperature": 0.0, "n_threads": 2}, configs=configs,
                         prompts=prompts)  # fmt: skip
    result.runs = [
        run("target", HOSTILE, "code", 0, 10.0),
        run("adaptive", HOSTILE, "code", 0, 17.5, 30, 21),
        run("llama.cpp ngram-simple", HOSTILE, "code", 0, 12.25, 8, 2, ours=False),
        run("target", HOSTILE, "code", 1, 10.5),
        run("target", "b", HOSTILE, 0, 8.0),
        run("adaptive", "b", HOSTILE, 0, 6.0, 10, 1),
        run("llama.cpp ngram-simple", "b", HOSTILE, 0, 8.4, 0, 0, ours=False),
        run("target", "b", HOSTILE, 1, 8.2),
    ]
    result.machine = {"cpu": HOSTILE, "physical_cores": 2}
    result.models = {"target": {"name": HOSTILE, "path": "/m/t.gguf", "size": 10**9},
                     "draft": None}  # fmt: skip
    result.tools = {"llama.cpp": {"binary": "/opt/llama/bin/x", "version": "b1"}}
    result.plan = {"mode": "quick", "notes": [f"note {HOSTILE}"]}
    return to_json(result)


class Page(HTMLParser):
    """What the page holds: elements opened and closed in order, every element's attributes,
    the runs table's cells, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.runs: dict[int, list[tuple[dict[str, str], str]]] = {}
        self.row: int | None = None
        self.cell: dict[str, str] | None = None
        self.text: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes))
        if tag not in VOID:
            self.stack.append(tag)
        if tag == "tr" and "data-run" in attributes:
            self.row = int(attributes["data-run"])
            self.runs[self.row] = []
        elif tag == "td" and self.row is not None:
            self.cell = attributes
            self.runs[self.row].append((attributes, ""))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag == "tr":
            self.row = None
        elif tag == "td":
            self.cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self.stack and self.stack[-1] == "script":
            self.scripts.append(data)
        if self.cell is not None and self.row is not None:
            attributes, text = self.runs[self.row][-1]
            self.runs[self.row][-1] = (attributes, text + data)


def parse(page: str) -> Page:
    parser = Page()
    parser.feed(page)
    parser.close()
    return parser


def test_the_page_is_well_formed_and_fetches_nothing(report):
    page = parse(render_html(report))
    assert page.errors == [] and page.stack == []
    assert [tag for tag, _ in page.elements[:3]] == ["html", "head", "meta"]
    for tag, attributes in page.elements:
        assert not {"src", "href"} & set(attributes), tag
        assert tag not in {"link", "img", "iframe", "object"}
    assert [a.get("type") for t, a in page.elements if t == "script"] == ["application/json"]
    xmlns = [a["xmlns"] for t, a in page.elements if t == "svg"]
    assert len(xmlns) == 2 and set(xmlns) == {"http://www.w3.org/2000/svg"}


def test_text_from_outside_stays_text(report):
    page = parse(render_html(report))
    text = "".join(page.text)
    assert text.count(HOSTILE) >= 5  # prompt id, category, model name, CPU, a note
    assert [t for t, _ in page.elements].count("script") == 1  # only the JSON block


def test_the_charts_and_tables_carry_the_jsons_numbers(report):
    page = parse(render_html(report))
    bars = {(a["data-config"], a["data-category"]): float(a["data-speedup"])
            for t, a in page.elements if t == "rect" and a.get("class") == "bar"}  # fmt: skip
    expected = {(r["config"], r["category"]): r["speedup"]["median"]
                for r in report["summary"] if r["config"] != "target"}  # fmt: skip
    assert bars == expected and ("llama.cpp ngram-simple", HOSTILE) in bars
    speeds = {a["data-config"]: float(a["data-tokens-per-s"])
              for t, a in page.elements if t == "rect" and a.get("class") == "tps"}  # fmt: skip
    assert speeds == {r["config"]: r["tokens_per_s"]["median"]
                      for r in report["summary"] if r["category"] == "all"}  # fmt: skip
    assert len(page.runs) == len(report["runs"]) == 8
    for index, run in enumerate(report["runs"]):
        cells = {a.get("data-key"): (a, text) for a, text in page.runs[index] if a.get("data-key")}
        attributes, shown = cells["tokens_per_s"]
        assert float(attributes["data-value"]) == run["tokens_per_s"]
        assert shown == f"{run['tokens_per_s']:.2f}"
        attributes, shown = cells["acceptance_rate"]
        assert float(attributes["data-value"]) == run["acceptance_rate"]
        assert shown == f"{run['acceptance_rate']:.1%}"
    [data] = page.scripts
    assert json.loads(data) == report


def test_the_page_names_the_machine_pair_calibration_and_what_it_rests_on(report):
    report["calibration"] = {"summary": "target 1 token 92.1 ms", "verify_s": {"1": 0.0921},
                             "draft_step_s": 0.039, "status": {"describe": "cached"}}  # fmt: skip
    text = " ".join(parse(render_html(report)).text)
    for expected in ("target 1 token 92.1 ms", "verify 1 tokens (s)", "/opt/llama/bin/x",
                     "2 prompts in 2 categories; 8 runs (1 round each, the target alone twice)",
                     "physical_cores", "(1000 MB)"):  # fmt: skip
        assert expected in text, expected
