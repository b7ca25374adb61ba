"""`specllama bench --report FILE.html`: one self-contained page, readable offline (inline CSS
and SVG, no script, no font or stylesheet fetched), with the terminal's speedup chart, the
tokens/s of each configuration, the machine, the pair, the calibration, what the figures rest
on, and every run's tokens/s and acceptance. The report dict itself (`summary.to_json`) rides
along in a `<script type="application/json">` block for whoever wants the numbers back.

Every text that comes from outside (prompt ids, categories, file names, the CPU's name) is
escaped; numbers carry their exact JSON value in `data-` attributes."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from specllama.bench.summary import bar_scale, describe_constraint_cost, rests_on, speedup_rows

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#ff9da7",
    "#9c755f",
    "#e15759",
    "#bab0ac",
)
CHART_WIDTH = 920
LABEL_WIDTH = 170
VALUE_WIDTH = 250
BAR_HEIGHT = 14
GAP = 10

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1100px;
       color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: right; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; }
.rests { background: #fff8e1; padding: 0.6em 0.8em; border-left: 4px solid #f2b300; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
dt { color: #666; } dd { margin: 0; }
svg text { font: 12px system-ui, sans-serif; }
.legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def write_html(report: dict[str, Any], path: Path) -> None:
    path.write_text(render_html(report), encoding="utf-8")


def render_html(report: dict[str, Any]) -> str:
    """The whole page."""
    target = report["models"]["target"]["name"]
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>specllama bench · {_e(target)}</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>specllama bench</h1>",
        f"<p>{_e(report['created'])} · {_e(target)}</p>",
        f'<p class="rests" id="rests-on">Rests on: {_e(rests_on(report))}</p>',
        _constraint_cost(report),
        "<h2>Speedup over the target alone</h2>",
        "<p>Median over each category's prompts, a line to the lowest and highest prompt; "
        "the dashed line is the target alone (1.0x).</p>",
        speedup_svg(report),
        "<h2>Tokens per second, all prompts</h2>",
        tokens_svg(report),
        "<h2>Per configuration and category</h2>",
        summary_table(report),
        "<h2>Machine</h2>",
        _facts(report["machine"]),
        "<h2>Pair</h2>",
        _pair(report),
        "<h2>Calibration</h2>",
        _calibration(report.get("calibration")),
        "<h2>Settings and plan</h2>",
        _facts({**report["settings"], **{f"plan {k}": v for k, v in _plan(report).items()}}),
        _notes(report),
        "<h2>Every run</h2>",
        runs_table(report),
        _data(report),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _colours(report: dict[str, Any]) -> dict[str, str]:
    names = [c["name"] for c in report["configs"] if c["name"] != "target"]
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _tag(name: str, attrs: dict[str, object], content: str = "") -> str:
    """An element, every attribute escaped; numbers of a drawing rounded to 0.1."""

    def value(v: object) -> str:
        return f"{v:.1f}" if isinstance(v, float) else _e(v)

    text = "".join(f' {k.replace("_", "-")}="{value(v)}"' for k, v in attrs.items())
    return f"<{name}{text}>{content}</{name}>"


def _legend(colours: dict[str, str]) -> str:
    items = "".join(
        f'<span><i style="background:{c}"></i>{_e(n)}</span>' for n, c in colours.items()
    )
    return f'<p class="legend">{items}</p>'


def _svg(svg_id: str, label: str, height: float, shapes: list[str]) -> str:
    attrs = {"id": svg_id, "xmlns": "http://www.w3.org/2000/svg", "width": CHART_WIDTH,
             "height": height, "role": "img", "aria_label": label}  # fmt: skip
    return _tag("svg", attrs, "".join(shapes))


def _value_text(y: float, text: str) -> str:
    return _tag("text", {"x": CHART_WIDTH - VALUE_WIDTH + 6, "y": y + BAR_HEIGHT - 3}, _e(text))


def speedup_svg(report: dict[str, Any]) -> str:
    """Grouped horizontal bars: per category, one bar per configuration, a line across the
    prompts' range, and a dashed line at 1.0 (the target alone)."""
    rows = speedup_rows(report)
    colours = _colours(report)
    scale = bar_scale(rows)
    area = CHART_WIDTH - LABEL_WIDTH - VALUE_WIDTH

    def x(speedup: float) -> float:
        return LABEL_WIDTH + area * speedup / scale

    shapes, y = [], float(GAP)
    for category in dict.fromkeys(r["category"] for r in rows):
        label = {"x": 0.0, "y": y + BAR_HEIGHT - 3, "font_weight": "bold"}
        shapes.append(_tag("text", label, _e(category)))
        for row in (r for r in rows if r["category"] == category):
            s, mid = row["speedup"], y + BAR_HEIGHT / 2
            title = _tag("title", {}, _e(f"{row['config']}, {category}: {s['median']:.2f}x"))
            bar = {"class": "bar", "x": float(LABEL_WIDTH), "y": y,
                   "width": x(s["median"]) - LABEL_WIDTH, "height": float(BAR_HEIGHT),
                   "fill": colours.get(row["config"], "#888"), "data_config": row["config"],
                   "data_category": category, "data_speedup": repr(s["median"]),
                   "data_min": repr(s["min"]), "data_max": repr(s["max"])}  # fmt: skip
            span = {"x1": x(s["min"]), "x2": x(s["max"]), "y1": mid, "y2": mid,
                    "stroke": "#222"}  # fmt: skip
            shapes += [_tag("rect", bar, title), _tag("line", span)]
            shapes.append(_value_text(y, f"{s['median']:.2f}x {row['config']}"))
            y += BAR_HEIGHT + 2
        y += GAP
    one = {"x1": x(1.0), "x2": x(1.0), "y1": 0.0, "y2": y, "stroke": "#222",
           "stroke_dasharray": "4 3"}  # fmt: skip
    shapes += [_tag("line", one), _tag("text", {"x": x(1.0) + 3, "y": y + 12}, "1.0x")]
    shapes.append(_tag("text", {"x": x(scale) - 30, "y": y + 12}, f"{scale:.1f}x"))
    label = "speedup per category and configuration"
    return _legend(colours) + _svg("speedup-chart", label, y + 18, shapes)


def tokens_svg(report: dict[str, Any]) -> str:
    """One bar per configuration: its median tokens/s over all prompts."""
    rows = [r for r in report["summary"] if r["category"] == "all"]
    top = max([r["tokens_per_s"]["median"] for r in rows] + [1e-9])
    area = CHART_WIDTH - LABEL_WIDTH - VALUE_WIDTH
    colours = {**_colours(report), "target": "#555"}
    shapes, y = [], float(GAP)
    for row in rows:
        tps = row["tokens_per_s"]["median"]
        bar = {"class": "tps", "x": float(LABEL_WIDTH), "y": y, "width": area * tps / top,
               "height": float(BAR_HEIGHT), "fill": colours.get(row["config"], "#888"),
               "data_config": row["config"], "data_tokens_per_s": repr(tps)}  # fmt: skip
        shapes.append(_tag("text", {"x": 0.0, "y": y + BAR_HEIGHT - 3}, _e(row["config"])))
        shapes += [_tag("rect", bar), _value_text(y, f"{tps:.1f} tok/s")]
        y += BAR_HEIGHT + 4
    return _svg("tokens-chart", "tokens per second per configuration", y + GAP, shapes)


def _cell(value: object, spec: str = "", key: str = "") -> str:
    attrs = f' data-key="{_e(key)}"' if key else ""
    if value is None:
        return f"<td{attrs}>-</td>"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and spec:
        return f'<td{attrs} data-value="{value}">{format(value, spec)}</td>'
    return f'<td class="text"{attrs}>{_e(value)}</td>'


def _table(table_id: str, head: list[str], body: list[str]) -> str:
    cells = "".join(
        f'<th class="text">{_e(h)}</th>' if i < 2 else f"<th>{_e(h)}</th>"
        for i, h in enumerate(head)
    )
    head_row = f"<thead><tr>{cells}</tr></thead>"
    return f'<table id="{table_id}">{head_row}<tbody>{"".join(body)}</tbody></table>'


def summary_table(report: dict[str, Any]) -> str:
    head = [
        "config",
        "category",
        "prompts",
        "runs",
        "tok/s",
        "speedup",
        "lowest",
        "highest",
        "acceptance",
        "accepted/round",
        "equals target",
    ]
    body = []
    for row in report["summary"]:
        s = row["speedup"] or {}
        body.append(
            "<tr>"
            + _cell(row["config"])
            + _cell(row["category"])
            + _cell(row["n_prompts"], "d")
            + _cell(row["n_runs"], "d")
            + _cell(row["tokens_per_s"]["median"], ".2f", "tokens_per_s")
            + _cell(s.get("median"), ".2f", "speedup")
            + _cell(s.get("min"), ".2f")
            + _cell(s.get("max"), ".2f")
            + _cell(row["acceptance_rate"], ".1%", "acceptance_rate")
            + _cell(row["mean_accepted_per_round"], ".2f")
            + _cell(row["equals_target"], ".0%")
            + "</tr>"
        )
    return _table("summary-table", head, body)


def runs_table(report: dict[str, Any]) -> str:
    """Every run: its configuration, prompt, round, tokens, seconds, tokens/s, acceptance."""
    head = [
        "config",
        "prompt",
        "category",
        "round",
        "prompt tokens",
        "tokens",
        "seconds",
        "tok/s",
        "drafted",
        "accepted",
        "acceptance",
        "finish",
        "equals target",
    ]
    body = []
    for index, run in enumerate(report["runs"]):
        equal = run["equals_target"]
        body.append(
            f'<tr data-run="{index}">'
            + _cell(run["config"])
            + _cell(run["prompt_id"])
            + _cell(run["category"])
            + _cell(run["repeat"] + 1, "d")
            + _cell(run["n_prompt"], "d")
            + _cell(run["n_generated"], "d", "n_generated")
            + _cell(run["time_s"], ".3f", "time_s")
            + _cell(run["tokens_per_s"], ".2f", "tokens_per_s")
            + _cell(run["n_drafted"], "d")
            + _cell(run["n_accepted"], "d")
            + _cell(run["acceptance_rate"], ".1%", "acceptance_rate")
            + _cell(run["finish_reason"])
            + _cell(None if equal is None else "yes" if equal else "no")
            + "</tr>"
        )
    return _table("runs-table", head, body)


def _facts(facts: dict[str, Any]) -> str:
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(_plain(v))}</dd>" for k, v in facts.items())
    return f"<dl>{items}</dl>"


def _plain(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "-"
    return "-" if value is None else str(value)


def _pair(report: dict[str, Any]) -> str:
    models = report["models"]
    facts = {}
    for role in ("target", "draft"):
        model = models.get(role)
        facts[role] = f"{model['name']} ({model['size'] / 1e6:.0f} MB)" if model else "none"
        if model and model.get("across_tokenizers"):
            facts[role] += ", across tokenizers (its text re-tokenised)"
    for name, tool in (report.get("tools") or {}).items():
        facts[name] = f"{tool['binary']} (version {tool['version']})"
    return _facts(facts)


def _calibration(measured: dict[str, Any] | None) -> str:
    if not measured:
        return "<p>None: no configuration needed the machine's costs.</p>"
    facts = {"summary": measured["summary"]}
    if measured.get("status"):
        facts["which"] = measured["status"]["describe"]
    facts.update({f"verify {n} tokens (s)": v for n, v in measured["verify_s"].items()})
    facts["draft step (s)"] = measured["draft_step_s"]
    return _facts(facts)


def _plan(report: dict[str, Any]) -> dict[str, Any]:
    plan = dict(report.get("plan") or {})
    plan.pop("notes", None)
    return plan


def _constraint_cost(report: dict[str, Any]) -> str:
    line = describe_constraint_cost(report)
    return f'<p id="constraint-cost">{_e(line)}</p>' if line else ""


def _notes(report: dict[str, Any]) -> str:
    notes = [*(report.get("plan") or {}).get("notes", []), *(report.get("notices") or [])]
    if not notes:
        return ""
    return "<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>"


def _data(report: dict[str, Any]) -> str:
    """The report as JSON, escaped so that no text in it can end the block."""
    text = json.dumps(report)
    for char, code in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, code)
    return f'<script type="application/json" id="bench-data">{text}</script>'
