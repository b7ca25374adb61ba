"""/metrics' text: Prometheus' own parser reads it, its counters follow the rounds and answers
fed to it and never go back, and acceptance by position follows from each round's counts."""

from __future__ import annotations

import random
import re
import threading
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from specllama.engine.events import RoundEvent
from specllama.engine.stats import GenerationStats
from specllama.server.metrics import (
    DecodeCounts,
    Family,
    Now,
    ServerMetrics,
    drafter_label,
    exposition,
    now_of,
)

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def parsed(text: str) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}}, read by prometheus_client's parser."""
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[name].get(tuple(sorted(labels.items())), 0.0)


def random_rounds(seed: int, n: int = 200) -> list[RoundEvent]:
    rng = random.Random(seed)
    sources = ["model", "ngram3", "ngram12-mixed", "mtp", ""]
    rounds = []
    for _ in range(n):
        source = rng.choice(sources)
        drafted = rng.randint(1, 8) if source else 0
        accepted = rng.randint(0, drafted)
        rounds.append(RoundEvent(drafted, accepted, 0.01, 0.02, source=source, k=drafted))
    return rounds


def answer_stats(n_prompt: int, n_generated: int, reason: str = "stop") -> GenerationStats:
    return GenerationStats(
        n_prompt=n_prompt,
        n_generated=n_generated,
        prefill_s=n_prompt / 100,
        time_s=n_generated / 20,
        finish_reason=reason,
    )


def test_every_metric_has_help_and_type_and_a_valid_name():
    metrics = ServerMetrics()
    for event in random_rounds(1, 20):
        metrics.on_round(event)
    metrics.on_answer(answer_stats(50, 10), 5)
    text = metrics.render(Now(1, 0, 60, 512, {"loads": 2, "entries": 1, "bytes": 9}))
    assert text.endswith("\n")
    families = list(text_string_to_metric_families(text))
    names = re.findall(r"^# TYPE (\S+) (counter|gauge)$", text, re.M)
    assert len(names) == len(families) == len(set(names))
    for name, kind in names:
        assert NAME.fullmatch(name), name
        assert f"# HELP {name} " in text
        assert name.startswith(("llamacpp:", "specllama:"))
        assert name.endswith("_total") or kind == "gauge" or name == "llamacpp:n_tokens_max"
    assert {f.type for f in families} == {"counter", "gauge"}


def test_the_llama_server_counters_add_up_the_answers():
    metrics = ServerMetrics()
    answers = [(answer_stats(40, 12, "length"), 8), (answer_stats(300, 30), 0)]
    for stats, reused in answers:
        metrics.on_answer(stats, reused)
    samples = parsed(metrics.render(Now()))
    evaluated = sum(stats.n_prompt - reused for stats, reused in answers)
    assert value(samples, "llamacpp:prompt_tokens_total") == evaluated
    assert value(samples, "llamacpp:prompt_tokens_cached_total") == 8
    assert value(samples, "llamacpp:tokens_predicted_total") == 42
    seconds = value(samples, "llamacpp:prompt_seconds_total")
    assert abs(seconds - sum(stats.prefill_s for stats, _ in answers)) < 1e-9
    assert value(samples, "llamacpp:n_tokens_max_total") == 330  # the parser adds _total
    assert value(samples, "specllama:answers_total", finish_reason="length") == 1
    assert value(samples, "specllama:answers_total", finish_reason="stop") == 1


def test_acceptance_by_position_follows_each_rounds_counts():
    metrics = ServerMetrics()
    rounds = random_rounds(7)
    for event in rounds:
        metrics.on_round(event)
    samples = parsed(metrics.render(Now()))
    for drafter in ("model", "ngram", "mtp"):
        mine = [e for e in rounds if e.source and drafter_label(e.source) == drafter]
        drafted = sum(e.n_drafted for e in mine)
        accepted = sum(e.n_accepted for e in mine)
        assert value(samples, "specllama:drafted_tokens_total", drafter=drafter) == drafted
        assert value(samples, "specllama:accepted_tokens_total", drafter=drafter) == accepted
        assert value(samples, "specllama:drafts_total", drafter=drafter) == len(mine)
        reached = [
            value(
                samples, "specllama:draft_position_drafted_total", drafter=drafter, position=str(i)
            )
            for i in range(9)
        ]
        kept = [
            value(
                samples, "specllama:draft_position_accepted_total", drafter=drafter, position=str(i)
            )
            for i in range(9)
        ]
        assert reached == [sum(e.n_drafted > i for e in mine) for i in range(9)]
        assert kept == [sum(e.n_accepted > i for e in mine) for i in range(9)]
        assert sum(reached) == drafted and sum(kept) == accepted
    everyone = [e for e in rounds if e.n_drafted]
    assert value(samples, "llamacpp:spec_decode_num_drafts_total") == len(everyone)
    assert value(samples, "llamacpp:spec_decode_num_draft_tokens_total") == sum(
        e.n_drafted for e in everyone
    )
    for i in range(9):
        kept_here = sum(e.n_accepted > i for e in everyone)
        got = value(
            samples, "llamacpp:spec_decode_num_accepted_tokens_per_pos_total", position=str(i)
        )
        assert got == kept_here


def test_a_round_that_drafted_nothing_counts_nowhere():
    metrics = ServerMetrics()
    metrics.on_round(RoundEvent(0, 0, 0.0, 0.02))
    samples = parsed(metrics.render(Now()))
    assert "specllama:drafts_total" not in samples
    assert value(samples, "llamacpp:spec_decode_num_drafts_total") == 0


def test_counters_never_go_back_and_the_rate_gauges_cover_the_last_scrape_only():
    metrics = ServerMetrics()
    previous: dict = {}
    rounds = random_rounds(3, 60)
    for step in range(6):
        for event in rounds[step * 10 : (step + 1) * 10]:
            metrics.on_round(event)
        if step % 2 == 0:
            metrics.on_answer(answer_stats(30 + step, 5 + step), step)
        text = metrics.render(Now())
        samples = parsed(text)
        counters = [f for f in text_string_to_metric_families(text) if f.type == "counter"]
        for family in counters:
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                assert sample.value >= previous.get(key, 0.0), key
                previous[key] = sample.value
        rate = value(samples, "llamacpp:predicted_tokens_seconds")
        if step % 2 == 0:  # 5 + step tokens in (5 + step) / 20 s
            assert abs(rate - 20) < 1e-9
        else:  # nothing ended since the previous scrape
            assert rate == 0


def test_rounds_counted_from_several_threads_are_all_counted():
    metrics = ServerMetrics()
    event = RoundEvent(4, 2, 0.0, 0.0, source="model")

    def count() -> None:
        for _ in range(2000):
            metrics.on_round(event)

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    samples = parsed(metrics.render(Now()))
    assert value(samples, "specllama:drafted_tokens_total", drafter="model") == 4 * 2000 * 4
    assert (
        value(samples, "specllama:draft_position_accepted_total", drafter="model", position="1")
        == 8000
    )


def test_the_gauges_read_the_queue_its_slots_and_its_cache():
    slots = [{"n_held": 100, "n_ctx": 512}, {"n_held": 28, "n_ctx": 512}]
    cache = SimpleNamespace(
        facts=lambda: {"entries": 2, "bytes": 5000, "limit_bytes": 9000, "loads": 3}
    )
    decodes = {"target": DecodeCounts(10, 25, 300, 1.5), "draft": DecodeCounts(40, 60, 60, 0.5)}
    queue = SimpleNamespace(
        slot_facts=lambda: slots,
        running=["a job"],
        waiting=2,
        cache=cache,
        decode_counts=lambda: decodes,
    )
    samples = parsed(ServerMetrics().render(now_of(queue)))
    assert value(samples, "llamacpp:n_decode_total") == 10  # the target's, as llama-server's
    assert value(samples, "llamacpp:n_busy_slots_per_decode") == 2.5
    assert value(samples, "specllama:decode_calls_total", model="draft") == 40
    assert value(samples, "specllama:decode_sequences_total", model="draft") == 60
    assert value(samples, "specllama:decode_tokens_total", model="target") == 300
    assert value(samples, "specllama:decode_seconds_total", model="target") == 1.5
    assert value(samples, "llamacpp:requests_processing") == 1
    assert value(samples, "llamacpp:requests_deferred") == 2
    assert value(samples, "llamacpp:kv_cache_tokens") == 128
    assert value(samples, "llamacpp:kv_cache_usage_ratio") == 128 / 1024
    assert value(samples, "specllama:prompt_cache_loads_total") == 3
    assert value(samples, "specllama:prompt_cache_bytes") == 5000
    assert value(samples, "specllama:prompt_cache_limit_bytes") == 9000
    without_cache = SimpleNamespace(
        slot_facts=lambda: [], running=[], waiting=0, cache=None, decode_counts=dict
    )
    samples = parsed(ServerMetrics().render(now_of(without_cache)))
    assert value(samples, "llamacpp:kv_cache_usage_ratio") == 0
    assert value(samples, "specllama:prompt_cache_entries") == 0


def test_label_values_and_help_lines_are_escaped():
    odd = 'say "hi"\\ then\nstop'
    text = exposition([Family("specllama:odd_total", "counter", "a \\ b\nc", [((("x", odd),), 1)])])
    (family,) = text_string_to_metric_families(text)
    assert family.samples[0].labels == {"x": odd}
    assert family.documentation == "a \\ b\nc"
    assert text.count("\n") == 3  # HELP, TYPE, one sample: no line broken by a value


def test_drafter_labels_stay_few():
    assert drafter_label("ngram12-mixed") == drafter_label("ngram3") == "ngram"
    assert [drafter_label(s) for s in ("model", "mtp", "eagle3", "grammar")] == [
        "model",
        "mtp",
        "eagle3",
        "grammar",
    ]
