"""--measure: the expected speedup from measured costs and acceptance, the fit of the acceptance,
and a real pair measured once, then read from the cache without loading anything."""

from __future__ import annotations

import json

import pytest
from store_fakes import place
from typer.testing import CliRunner

from specllama.bench import pair_probe
from specllama.bench.pair_probe import acceptance_from, expected
from specllama.cli.app import app
from specllama.policy.costs import Costs


def flat_costs(draft_step: float, batch_extra: float = 0.0) -> Costs:
    """One target token 10 ms; a batch of n costs 10 ms + batch_extra * (n - 1)."""
    sizes = (1, 2, 4, 8, 17, 33)
    return Costs(tuple((n, 0.01 + batch_extra * (n - 1)) for n in sizes), draft_step_s=draft_step)


@pytest.mark.parametrize("a", [0.0, 0.3, 0.7, 0.95])
def test_the_acceptance_is_recovered_from_the_mean_accepted_per_round(a):
    k = 4
    mean = sum(a**i for i in range(1, k + 1))
    assert acceptance_from(mean, k) == pytest.approx(a, abs=1e-9)
    assert acceptance_from(k, k) == 1.0


def test_free_drafts_that_are_always_right_pay_the_longest_round():
    result = expected(flat_costs(0.0), mean_accepted=4, k=4)
    assert result.acceptance == 1.0 and result.best_k == pair_probe.K_MAX
    assert result.speedup == pytest.approx(pair_probe.K_MAX + 1)


def test_drafts_that_are_never_right_lose():
    result = expected(flat_costs(0.003, 0.002), mean_accepted=0, k=4)
    assert result.speedup < 1 and result.best_k == 1


def test_the_speedup_is_the_formula_at_the_best_length():
    costs = flat_costs(0.002, 0.001)
    result = expected(costs, mean_accepted=sum(0.8**i for i in range(1, 5)), k=4)
    a, k = 0.8, result.best_k
    formula = (1 - a ** (k + 1)) / (1 - a) * costs.verify(1) / (k * 0.002 + costs.verify(k + 1))
    assert result.speedup == pytest.approx(formula, rel=1e-3)
    assert result.target_tok_s == 100 and result.draft_step_ratio == 0.2


@pytest.mark.slow
def test_measure_a_real_pair_once_then_read_it_from_the_cache(
    bare_machine, tmp_path, smol_f32, smol_q4, monkeypatch
):
    folder = tmp_path / "pair"
    place(smol_f32, folder / "target-f32.gguf")
    place(smol_q4, folder / "draft-q4.gguf")
    # One short prompt instead of three: the test measures the path, not the pair.
    monkeypatch.setattr(pair_probe, "PROBE_TOKENS", 16)
    monkeypatch.setattr(pair_probe, "PROBE_CATEGORIES", ("chat",))
    args = ["models", "--local", "--dir", str(folder), "--json"]
    measured = CliRunner().invoke(app, [*args, "--measure"])
    assert measured.exit_code == 0, measured.output
    (pair,) = json.loads(measured.stdout)["pairs"]
    assert pair["speedup"] > 0 and "measuring 1/2" in measured.stderr  # then n-gram lookup

    def no_loading(*_args, **_kwargs):
        raise AssertionError("a cached measurement must not load the models")

    monkeypatch.setattr(pair_probe, "Engine", no_loading)
    again = CliRunner().invoke(app, [*args, "--measure"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["pairs"][0]["speedup"] == pair["speedup"]
    listed = CliRunner().invoke(app, args)  # without --measure: the measurement is shown
    assert json.loads(listed.stdout)["pairs"][0]["speedup"] == pair["speedup"]
