"""What a batched step costs and how it is charged to its sequences (`StepCosts`), on made-up
steps whose costs are known, and replayed on steps recorded in a server (recorded_steps.json:
every target llama_decode of one `concurrent_clients.py` phase at C = 4 and at C = 8)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from specllama.llama.evaluated import Part
from specllama.llama.sequences import Stepper, _Request
from specllama.llama.step_costs import StepCosts

RECORDED = json.loads((Path(__file__).parent / "recorded_steps.json").read_text())


def test_a_step_is_charged_by_what_each_sequence_adds_to_it():
    """Steps that cost 50 ms + 10 ms a token: a slot with 1 token beside one with 9 pays its
    share of the 50 and its own 10; alone it pays the whole step."""
    costs = StepCosts()
    for width in (1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128):
        costs.add(width, 0.050 + 0.010 * width)
    fixed, per_token = costs.line()
    assert fixed == pytest.approx(0.050) and per_token == pytest.approx(0.010)
    one, nine = costs.charges([1, 9], 0.150)
    assert one == pytest.approx(0.035) and nine == pytest.approx(0.115)
    assert costs.charges([5], 0.2) == [0.2]


def test_until_widths_vary_every_token_pays_alike():
    costs = StepCosts()
    for _ in range(10):
        costs.add(4, 0.1)
    assert costs.line() == (0.0, pytest.approx(0.025))
    assert costs.charges([1, 3], 0.1) == [pytest.approx(0.025), pytest.approx(0.075)]


def test_the_margin_is_read_near_the_step_not_off_a_prompt_chunk():
    """A CPU's shape: prompt chunks of 256 tokens at 15 ms a token, verifies of four slots at
    120 ms + 35 ms a drafted token. Drafts in a full batch pay 35 ms a token, not the ~16 ms a
    line through both would charge, and their charges still add up to the step."""
    costs = StepCosts()
    for _ in range(4):
        costs.add(256, 256 * 0.015)
    for extra in (0, 1, 3, 6, 0, 2, 0, 4, 0, 5):
        costs.add(4 + extra, 0.120 + 0.035 * extra)
    assert costs.line()[1] < 0.020
    assert costs.marginal(4, 10) == pytest.approx(0.035)
    charges = costs.charges([7, 1, 1, 1], 0.330)
    assert sum(charges) == pytest.approx(0.330)
    assert charges[0] - charges[1] == pytest.approx(6 * 0.035)


def test_a_batch_that_has_not_drafted_yet_is_priced_so_that_its_slack_is_tried():
    """Two slots' plain steps (80 ms) beside prompt chunks (15 ms a token): with no step near
    that drafted, a drafted token is priced by the line through every width (the chunks'
    ~15 ms), not at the plain steps' 40 ms a token, which no draft could beat and so no step
    would ever show wrong."""
    costs = StepCosts()
    for _ in range(2):
        costs.add(256, 256 * 0.015)
    for _ in range(10):
        costs.add(2, 0.080)
    share, per_token = costs.price(2, 8)
    assert share == pytest.approx(0.040)
    assert per_token == pytest.approx(0.015, rel=0.05)


def _replay(steps: list[list]) -> tuple[list[float], list[float]]:
    """Each recorded verify step with drafts (S < W <= 4S tokens), before it is added: the
    relative error of what its drafts added (its seconds less the median plain step of S
    sequences) as `marginal` predicts it and as the line over every width does."""
    plain: dict[int, list[float]] = {}
    for sequences, tokens, seconds in steps:
        if sequences == tokens:
            plain.setdefault(sequences, []).append(seconds)
    costs, near, line = StepCosts(), [], []
    for sequences, tokens, seconds in steps:
        if 2 <= sequences < tokens <= 4 * sequences and sequences in plain:
            added = seconds - statistics.median(plain[sequences])
            drafts = tokens - sequences
            near.append(abs(costs.marginal(sequences, tokens) * drafts - added) / added)
            line.append(abs(costs.line()[1] * drafts - added) / added)
        costs.add(tokens, seconds)
    return near, line


def test_recorded_steps_are_predicted_better_near_their_width():
    for name in ("epyc-c4", "epyc-c8"):
        near, line = _replay(RECORDED[name])
        assert len(near) >= 8, name
        assert statistics.median(near) < 0.3, name
        assert statistics.median(near) <= statistics.median(line), name
    near, line = _replay(RECORDED["epyc-c8"])
    assert statistics.median(near) < 0.6 * statistics.median(line)


def test_in_a_compute_bound_batch_a_copy_does_not_draft():
    """Four slots on the 2-core EPYC (recorded): a drafted token adds about what the plain
    step costs a token, so even a copy accepted at 90% lowers the batch's tokens per second by
    drafting, and what the replay charges a drafted token at the full batch's verify steps
    says so, once those steps were seen (before, the line through the prompt chunks charges
    ~16 ms, half: that is how the first drafts beside other slots find out)."""
    steps = RECORDED["epyc-c4"]
    plain = statistics.median(s for n, w, s in steps if n == w == 4)
    costs, margins = StepCosts(), []
    for sequences, tokens, seconds in steps:
        if sequences == 4 < tokens <= 16:  # a verify with drafts
            margins.append(costs.marginal(sequences, tokens))
        costs.add(tokens, seconds)
    margin = statistics.median(margins)

    def rate(k: int, acceptance: float = 0.9) -> float:  # the batch's tokens per second
        return (3 + (1 - acceptance ** (k + 1)) / (1 - acceptance)) / (plain + margin * k)

    assert max(rate(k) for k in range(1, 9)) < rate(0)


def test_a_slot_beside_others_is_told_the_price_of_its_step_and_alone_it_is_not():
    """Steps of two slots: 80 ms plain, 30 ms a drafted token. A slot is told its share of the
    plain step (40 ms) and what a drafted token adds; alone, or before any step, nothing."""
    stepper, model = Stepper(), object()
    stepper.enter()
    assert stepper.price(model, 0) is None
    stepper.enter()
    assert stepper.price(model, 0) is None
    costs = stepper.costs.setdefault(id(model), StepCosts())
    for extra in (0, 2, 0, 4, 0, 1, 0, 3):
        costs.add(2 + extra, 0.080 + 0.030 * extra)
    share, per_token = stepper.price(model, 0)
    assert share == pytest.approx(0.040) and per_token == pytest.approx(0.030)
    stepper.leave()
    assert stepper.price(model, 0) is None


class _Model:
    """What the stepper asks of a model: its batch size and a step (rows of zeros)."""

    n_batch = 512

    def decode_parts(self, parts: list[Part]) -> list[np.ndarray]:
        return [np.zeros((len(part.logits_at), 4), dtype=np.float32) for part in parts]


def test_while_another_slot_prompt_goes_in_no_draft_is_worth_its_delay():
    """A step that carried slot 0's prompt chunk beside slot 1's token: slot 1 is told a drafted
    token costs more than any draft can bring (it would delay slot 0's first token); slot 0,
    whose own prompt it was, is priced as usual, and so is slot 1 after a step of tokens."""
    stepper, model = Stepper(), _Model()
    stepper.enter()
    stepper.enter()
    step = [_Request(model, Part(0, 0, [1] * 10, [9])), _Request(model, Part(1, 5, [2], [0]))]
    stepper._step(step)
    assert stepper.price(model, 1)[1] == math.inf
    assert stepper.price(model, 0)[1] < math.inf
    stepper._step([_Request(model, Part(0, 10, [3], [0])), _Request(model, Part(1, 6, [4], [0]))])
    assert stepper.price(model, 1)[1] < math.inf
