"""/metrics counts a request whose client went away: mid-prompt, the prompt tokens it evaluated
(those held already count as cached) and the seconds they took; mid-answer, its prompt and the
tokens it wrote. Driven through the generation driver with a fake engine whose prompt is
evaluated in chunks, and read back with Prometheus' parser."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from specllama.engine.events import RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.llama.evaluated import DecodeInterrupted
from specllama.server.driver import Done, Work, answer
from specllama.server.metrics import Now, ServerMetrics

CHUNK = 4
CHUNK_S = 0.02  # what evaluating one chunk of the prompt takes here


class FakeTarget:
    """A target whose prompt is evaluated `CHUNK` tokens at a time, stopping between chunks
    when asked (as `llama.evaluated` does), with `held` tokens evaluated already."""

    def __init__(self, held: list[int]) -> None:
        self.tokens = list(held)
        self.interrupted = None

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def common_prefix(self, tokens: list[int]) -> int:
        n = 0
        while n < min(len(tokens), len(self.tokens)) and tokens[n] == self.tokens[n]:
            n += 1
        return n

    def evaluate(self, prompt: list[int], after_chunk) -> None:
        del self.tokens[self.common_prefix(prompt) :]
        while self.n_past < len(prompt):
            if self.interrupted is not None and self.interrupted():
                raise DecodeInterrupted(f"stopped after {self.n_past} tokens")
            time.sleep(CHUNK_S)
            self.tokens += prompt[self.n_past : self.n_past + CHUNK]
            after_chunk(self.n_past)


class FakeEngine:
    """What the driver asks of an engine: a prompt evaluated in chunks, then one token a round
    (`after_chunk` and `after_round` let the test cancel at a chosen point)."""

    def __init__(self, held: list[int], after_chunk, after_round) -> None:
        self.target = FakeTarget(held)
        self.draft_model = None
        self.drafter = SimpleNamespace(name="none")
        self._after_chunk, self._after_round = after_chunk, after_round

    def target_text_stream(self, preserved=()):
        return SimpleNamespace(feed=lambda token: f"t{token} ", flush=lambda: "")

    def generate_thinking(self, prompt, params, *, max_tokens, **_) -> Iterator[object]:
        self.target.evaluate(prompt, self._after_chunk)
        for n in range(max_tokens):
            yield RoundEvent(0, 0, 0.0, 0.001)
            yield TokenEvent(n, False)
            self._after_round(n + 1)


def samples(metrics: ServerMetrics) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(metrics.render(Now())):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def run(prompt: list[int], held: list[int], *, at_chunk=None, at_round=None):
    """One generation, cancelled once `at_chunk` tokens of the prompt are evaluated or after
    `at_round` rounds: (its outputs, the metrics' samples, the seconds it took)."""
    cancelled = threading.Event()

    def after_chunk(n_past: int) -> None:
        if at_chunk is not None and n_past >= at_chunk:
            cancelled.set()

    def after_round(n: int) -> None:
        if at_round is not None and n >= at_round:
            cancelled.set()

    engine = FakeEngine(held, after_chunk, after_round)
    metrics = ServerMetrics()
    work = Work(prompt, SamplingParams(), max_tokens=8)
    began = time.perf_counter()
    outputs = list(answer(engine, work, cancelled, metrics))  # type: ignore[arg-type]
    return outputs, samples(metrics), time.perf_counter() - began, engine


PROMPT = list(range(100, 140))  # 40 tokens: 10 chunks


def test_a_request_cancelled_mid_prompt_counts_what_it_evaluated_and_its_seconds():
    outputs, found, took, engine = run(PROMPT, [], at_chunk=12)
    assert outputs == []  # nothing was answered
    assert engine.target.n_past == 12  # stopped within a chunk, what it evaluated kept
    assert found["llamacpp:prompt_tokens_total", ()] == 12
    seconds = found["llamacpp:prompt_seconds_total", ()]
    assert 3 * CHUNK_S <= seconds <= took
    assert found["specllama:requests_cancelled_total", (("during", "prompt"),)] == 1
    assert found["llamacpp:tokens_predicted_total", ()] == 0
    assert not any(name == "specllama:answers_total" for name, _ in found)


def test_tokens_held_already_count_as_cached_not_evaluated():
    outputs, found, _, engine = run(PROMPT, PROMPT[:20], at_chunk=28)
    assert outputs == [] and engine.target.n_past == 28
    assert found["llamacpp:prompt_tokens_total", ()] == 8
    assert found["llamacpp:prompt_tokens_cached_total", ()] == 20
    assert found["llamacpp:prompt_seconds_total", ()] >= 2 * CHUNK_S


def test_a_request_cancelled_mid_answer_counts_its_prompt_and_what_it_wrote():
    outputs, found, took, _ = run(PROMPT, [], at_round=3)
    assert not any(isinstance(o, Done) for o in outputs)
    assert found["llamacpp:prompt_tokens_total", ()] == len(PROMPT)
    assert 10 * CHUNK_S <= found["llamacpp:prompt_seconds_total", ()] <= took
    assert found["llamacpp:tokens_predicted_total", ()] == 3
    assert found["specllama:requests_cancelled_total", (("during", "answer"),)] == 1


def test_an_answer_that_ends_is_not_counted_cancelled():
    outputs, found, _, _ = run(PROMPT, [])
    assert isinstance(outputs[-1], Done)
    assert found["llamacpp:prompt_tokens_total", ()] == len(PROMPT)
    assert not any(name == "specllama:requests_cancelled_total" for name, _ in found)
