"""What GET /metrics shows: the server's counters and gauges in Prometheus' text exposition
format (version 0.0.4), so that people can watch a long agent session.

llama-server's names where it has them (`llamacpp:`: prompt and generated tokens and seconds,
reused prompt tokens, drafted and accepted tokens, requests processing and deferred, KV cache
use), so that dashboards made for it read ours; ours under `specllama:` for what it has not:
drafted and accepted tokens by drafter, acceptance by draft position, the prompt cache.

Counters only move forward: they are counted where the events happen (a round of the
speculative loop, an answer's end, a request cancelled: what it evaluated of its prompt and
generated counts as an answer's does), from the slots' threads. Gauges say the state when
/metrics is asked (the queue, the slots' contexts, the cache). The two throughput gauges are
llama-server's: the answers finished since the previous scrape, 0 when none was.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from specllama.engine.control import NGRAM, kind_of
from specllama.engine.events import RoundEvent
from specllama.engine.stats import GenerationStats
from specllama.server.prompt_cache import PromptCache

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]  # (name, value) pairs, in the order they are written

# The help lines: llama-server's words for its metrics, ours for the rest.
PROMPT_TOKENS = "Number of prompt tokens processed, excluding cached tokens"
CACHED = "Number of prompt tokens reused from the cache (the slot's or the prompt cache's)"
PROMPT_SECONDS = "Total time spent processing prompts"
PREDICTED = "Number of generation tokens processed"
PREDICTED_S = "Total time spent generating tokens"
TOKENS_MAX = "Largest observed sequence length (prompt + generation)"
DRAFTED = "Speculative: Total draft tokens generated"
KEPT = "Speculative: Total draft tokens accepted by the target model"
DRAFTS = "Speculative: Total speculative decoding verification steps"
PER_POSITION = "Accepted tokens per draft position"
PROMPT_RATE = "Average prompt throughput in tokens/s since the previous scrape"
PREDICTED_RATE = "Average generation throughput in tokens/s since the previous scrape"
PROCESSING = "Number of requests processing"
DEFERRED = "Number of requests deferred"
KV_TOKENS = "KV cache tokens: what the target's sequences hold, all slots"
KV_RATIO = "KV cache usage ratio: the tokens held over the context, all slots (1: full)"
ANSWERS = "Answers ended, by the loop's finish reason (stop, stop_string, length, context)"
CANCELLED = "Requests cancelled (client gone, server stopping), by where: prompt or answer"
BY_DRAFTER_DRAFTED = "Tokens drafted, by drafter"
BY_DRAFTER_KEPT = "Drafted tokens the target accepted, by drafter"
BY_DRAFTER_DRAFTS = "Rounds that drafted, by drafter"
POSITION_DRAFTED = "Drafts that reached position i (0: the first drafted token), by drafter"
POSITION_KEPT = "Drafts accepted at position i (then every earlier position was), by drafter"
DECODES = "Number of llama_decode() calls of the target"
BUSY = "Average number of slots per llama_decode() call of the target (those in the batch)"
MODEL_DECODES = "llama_decode() calls (batched steps), by model"
MODEL_SEQUENCES = "Sequences (slots) those calls carried together, by model"
MODEL_TOKENS = "Tokens those calls evaluated, by model"
MODEL_SECONDS = "Seconds those calls took, by model"
CACHE_LOADS = "Requests whose prompt prefix was loaded from the prompt cache in RAM (hits)"
CACHE_ENTRIES = "Saved prompt states in the prompt cache"
CACHE_BYTES = "Bytes the prompt cache holds"
CACHE_LIMIT = "The prompt cache's bound in bytes (--cache-ram; 0: off)"


@dataclass(frozen=True)
class Family:
    """One metric: its name, type, help line, and its samples (labels -> value)."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    samples: list[tuple[Labels, float]]


@dataclass(frozen=True)
class Unfinished:
    """What a request cancelled before its end had done: prompt tokens evaluated (`n_reused`
    were held already) in `prompt_s` seconds, and tokens generated in `generated_s`."""

    n_evaluated: int
    n_reused: int
    prompt_s: float
    prompt_done: bool  # its prompt was all evaluated: it stopped during the answer
    n_generated: int = 0
    generated_s: float = 0.0


class DecodeCounts(NamedTuple):
    """A model's llama_decode calls since the server started, and what they carried."""

    calls: int
    sequences: int  # a step of several slots is one call of several sequences
    tokens: int
    seconds: float


@dataclass(frozen=True)
class Now:
    """The server's state when /metrics is asked (the gauges)."""

    processing: int = 0  # requests a slot is answering
    deferred: int = 0  # requests waiting for a slot
    kv_tokens: int = 0  # tokens the slots' target sequences hold
    kv_capacity: int = 0  # tokens they may hold, all slots together
    cache: dict[str, int] = field(default_factory=dict)  # the prompt cache's facts, if any
    decodes: dict[str, DecodeCounts] = field(default_factory=dict)  # "target", "draft"


class Scheduler(Protocol):
    """What the gauges read of the queue (`GenerationQueue`, which imports this module)."""

    waiting: int  # requests waiting for a slot
    cache: PromptCache | None

    @property
    def running(self) -> list[Any]: ...  # the jobs the slots run

    def slot_facts(self) -> list[dict[str, object]]: ...  # what /slots shows of each

    def decode_counts(self) -> dict[str, DecodeCounts]: ...  # per model


def now_of(queue: Scheduler) -> Now:
    """Read the gauges off the running server's queue, its slots and its prompt cache."""
    slots = queue.slot_facts()
    return Now(
        processing=len(queue.running),
        deferred=queue.waiting,
        kv_tokens=sum(int(slot["n_held"]) for slot in slots),
        kv_capacity=sum(int(slot["n_ctx"]) for slot in slots),
        cache=queue.cache.facts() if queue.cache is not None else {},
        decodes=queue.decode_counts(),
    )


def drafter_label(source: str) -> str:
    """A round's source as a label: "ngram" for every match length ("ngram12-mixed"), else
    the source itself ("model", "mtp", "eagle3", "grammar"...), so that the labels stay few."""
    return NGRAM if kind_of(source) == NGRAM else source


class ServerMetrics:
    """The server's counters since it started. Thread-safe: the slots count from their own
    threads while the event loop renders."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: Counter[str] = Counter()  # llama-server's unlabelled counters
        self._answers: Counter[str] = Counter()  # finish reason -> answers
        self._cancelled: Counter[str] = Counter()  # "prompt" or "answer" -> requests
        self._drafted: Counter[str] = Counter()  # drafter -> tokens drafted
        self._accepted: Counter[str] = Counter()  # drafter -> tokens accepted
        self._drafts: Counter[str] = Counter()  # drafter -> rounds that drafted
        self._reached: Counter[tuple[str, int]] = Counter()  # (drafter, position) -> drafts
        self._kept: Counter[tuple[str, int]] = Counter()  # (drafter, position) -> accepted
        self._window: Counter[str] = Counter()  # since the last scrape, for the rate gauges
        self._n_tokens_max = 0

    def on_round(self, event: RoundEvent) -> None:
        """A round of the speculative loop: what it drafted, and how far the target agreed
        (the accepted tokens are the draft's first ones: position i is accepted only if every
        position before it was)."""
        if not event.n_drafted:
            return
        drafter = drafter_label(event.source)
        with self._lock:
            self._drafted[drafter] += event.n_drafted
            self._accepted[drafter] += event.n_accepted
            self._drafts[drafter] += 1
            for position in range(event.n_drafted):
                self._reached[drafter, position] += 1
            for position in range(event.n_accepted):
                self._kept[drafter, position] += 1

    def on_answer(self, stats: GenerationStats, n_reused: int) -> None:
        """An answer ended: its prompt (`n_reused` of its tokens were held already, so not
        evaluated) and its generated tokens, with the time each took."""
        evaluated = max(stats.n_prompt - n_reused, 0)
        with self._lock:
            self._count(evaluated, n_reused, stats.prefill_s, stats.n_generated, stats.time_s)
            self._answers[stats.finish_reason or "unknown"] += 1
            self._n_tokens_max = max(self._n_tokens_max, stats.n_prompt + stats.n_generated)

    def on_cancelled(self, cancelled: Unfinished) -> None:
        """A request stopped before its answer ended: what it did is counted all the same
        (a long prompt evaluated for a client that gave up is time the server spent)."""
        with self._lock:
            self._count(
                cancelled.n_evaluated,
                cancelled.n_reused,
                cancelled.prompt_s,
                cancelled.n_generated,
                cancelled.generated_s,
            )
            self._cancelled["answer" if cancelled.prompt_done else "prompt"] += 1

    def _count(
        self, evaluated: int, reused: int, prompt_s: float, generated: int, generated_s: float
    ) -> None:
        for counts in (self._totals, self._window):
            counts["prompt_tokens"] += evaluated
            counts["prompt_seconds"] += prompt_s
            counts["predicted_tokens"] += generated
            counts["predicted_seconds"] += generated_s
        self._totals["prompt_tokens_cached"] += reused

    def render(self, now: Now) -> str:
        """The exposition text; the throughput gauges' window starts again."""
        return exposition(self.families(now))

    def families(self, now: Now) -> list[Family]:
        with self._lock:
            window, self._window = self._window, Counter()
            return [
                *self._llama_server(now, window),
                *self._speculation(),
                *_cache(now),
                *_decodes(now),
            ]

    def _llama_server(self, now: Now, window: Counter[str]) -> list[Family]:
        totals, name = self._totals, "llamacpp:{}".format
        by_position: Counter[int] = Counter()
        for (_, position), count in self._kept.items():
            by_position[position] += count
        per_position = [((("position", str(p)),), n) for p, n in sorted(by_position.items())]
        counters = [
            (name("prompt_tokens_total"), totals["prompt_tokens"], PROMPT_TOKENS),
            (name("prompt_tokens_cached_total"), totals["prompt_tokens_cached"], CACHED),
            (name("prompt_seconds_total"), totals["prompt_seconds"], PROMPT_SECONDS),
            (name("tokens_predicted_total"), totals["predicted_tokens"], PREDICTED),
            (name("tokens_predicted_seconds_total"), totals["predicted_seconds"], PREDICTED_S),
            (name("n_tokens_max"), self._n_tokens_max, TOKENS_MAX),
            (name("spec_decode_num_draft_tokens_total"), sum(self._drafted.values()), DRAFTED),
            (name("spec_decode_num_accepted_tokens_total"), sum(self._accepted.values()), KEPT),
            (name("spec_decode_num_drafts_total"), sum(self._drafts.values()), DRAFTS),
        ]
        gauges = [
            (name("prompt_tokens_seconds"), _rate(window, "prompt"), PROMPT_RATE),
            (name("predicted_tokens_seconds"), _rate(window, "predicted"), PREDICTED_RATE),
            (name("requests_processing"), now.processing, PROCESSING),
            (name("requests_deferred"), now.deferred, DEFERRED),
            (name("kv_cache_tokens"), now.kv_tokens, KV_TOKENS),
            (name("kv_cache_usage_ratio"), now.kv_tokens / max(now.kv_capacity, 1), KV_RATIO),
        ]
        return [
            *(_one(metric, "counter", value, text) for metric, value, text in counters),
            Family(
                name("spec_decode_num_accepted_tokens_per_pos_total"),
                "counter",
                PER_POSITION,
                per_position,
            ),
            *(_one(metric, "gauge", value, text) for metric, value, text in gauges),
        ]

    def _speculation(self) -> list[Family]:
        name = "specllama:{}".format
        return [
            Family(name("answers_total"), "counter", ANSWERS, _by("finish_reason", self._answers)),
            Family(
                name("requests_cancelled_total"),
                "counter",
                CANCELLED,
                _by("during", self._cancelled),
            ),
            Family(
                name("drafted_tokens_total"),
                "counter",
                BY_DRAFTER_DRAFTED,
                _by("drafter", self._drafted),
            ),
            Family(
                name("accepted_tokens_total"),
                "counter",
                BY_DRAFTER_KEPT,
                _by("drafter", self._accepted),
            ),
            Family(
                name("drafts_total"), "counter", BY_DRAFTER_DRAFTS, _by("drafter", self._drafts)
            ),
            Family(
                name("draft_position_drafted_total"),
                "counter",
                POSITION_DRAFTED,
                _by_position(self._reached),
            ),
            Family(
                name("draft_position_accepted_total"),
                "counter",
                POSITION_KEPT,
                _by_position(self._kept),
            ),
        ]


def _cache(now: Now) -> list[Family]:
    facts, name = now.cache, "specllama:{}".format
    return [
        _one(name("prompt_cache_loads_total"), "counter", facts.get("loads", 0), CACHE_LOADS),
        _one(name("prompt_cache_entries"), "gauge", facts.get("entries", 0), CACHE_ENTRIES),
        _one(name("prompt_cache_bytes"), "gauge", facts.get("bytes", 0), CACHE_BYTES),
        _one(name("prompt_cache_limit_bytes"), "gauge", facts.get("limit_bytes", 0), CACHE_LIMIT),
    ]


def _decodes(now: Now) -> list[Family]:
    """How full the batches were: llama-server's two decode metrics (of the target, as it
    counts them), then ours by model."""
    target = now.decodes.get("target", DecodeCounts(0, 0, 0, 0.0))
    by_model = [
        ("calls", MODEL_DECODES),
        ("sequences", MODEL_SEQUENCES),
        ("tokens", MODEL_TOKENS),
        ("seconds", MODEL_SECONDS),
    ]
    return [
        _one("llamacpp:n_decode_total", "counter", target.calls, DECODES),
        _one(
            "llamacpp:n_busy_slots_per_decode",
            "gauge",
            target.sequences / max(target.calls, 1),
            BUSY,
        ),
        *(
            Family(
                f"specllama:decode_{column}_total",
                "counter",
                text,
                [
                    ((("model", model),), getattr(counts, column))
                    for model, counts in now.decodes.items()
                ],
            )
            for column, text in by_model
        ),
    ]


def exposition(families: Iterable[Family]) -> str:
    """Prometheus' text format: per metric its HELP and TYPE lines, then its samples; one
    line feed after every line, the last one included."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        lines += [f"{family.name}{_labels(labels)} {_value(v)}" for labels, v in family.samples]
    return "".join(line + "\n" for line in lines)


def _one(name: str, kind: str, value: float, help_text: str) -> Family:
    return Family(name, kind, help_text, [((), value)])


def _by(label: str, counts: Counter[str]) -> list[tuple[Labels, float]]:
    return [(((label, key),), n) for key, n in sorted(counts.items())]


def _by_position(counts: Counter[tuple[str, int]]) -> list[tuple[Labels, float]]:
    return [
        ((("drafter", drafter), ("position", str(position))), n)
        for (drafter, position), n in sorted(counts.items())
    ]


def _rate(window: Counter[str], what: str) -> float:
    """Tokens per second of `what` ("prompt" or "predicted") over the window."""
    seconds = window[f"{what}_seconds"]
    return window[f"{what}_tokens"] / seconds if seconds > 0 else 0.0


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_escape_label(value)}"' for name, value in labels) + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(value: float) -> str:
    """Integers without a decimal point (as counts read), other values as Python's repr."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
