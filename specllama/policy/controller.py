"""How many tokens to draft next round, and from which source: fixed, or adaptive.

Each round the loop asks the drafter what it could offer (`Drafter.sources(context)`: an
n-gram match of some length, the draft model with its backlog), asks the controller to `choose`
one source and a draft length, runs the round, and reports it back with `observe`.

The adaptive controller
-----------------------

It picks the source and length k with the highest expected rate E(a, k) / C(k), tokens per
second (`specllama.policy.costs`: E is the expected tokens of a round at acceptance a, C what
the round costs here, learnt online), and drafts nothing when nothing beats the target alone,
1 / C(0), by `margin` (beside other slots, by `BATCH_MARGIN` more).

What it knows of a source's acceptance a is a Beta posterior: a prior (`PRIORS`, worth
`prior_weight` tokens for an n-gram lane, `model_prior_weight` for the draft model, whose one
unlucky first round must not send it to rest) plus what the source's rounds showed, each
accepted draft token a success and the first rejected one a failure (the tokens after it say
nothing). Old evidence fades (`memory` per observation), so a source that changes (prose after
code) is seen changing. An n-gram source is a lane per match length (`lane_of`); matches under
`MIN_MATCH` tokens are never drafted from.

A lookup costs nothing to make, so a round that does not draft from the n-gram source offered
still says how it would have done (`RoundEvent.hindsight`: what it would have proposed, checked
against what the round emitted), and that counts as a drafted round's evidence would
(`hindsight`; False: only drafted rounds count, as before). A copy shows itself while the target
runs alone, a coincidence is seen for one before a verify is spent on it, and a resting lane is
back as soon as its lookups say it pays.

What rounds cost is learnt as they run (`specllama.policy.costs`), from a calibration that may
lie: the first round is the target alone, so what every choice is weighed against is seen, and
no draft is longer than four times the largest batch verified so far (`LiveCosts.draft_limit`).
Where the calibration's shape is not trusted, what a batch larger than any seen costs is the
rounds' straight line, and a CPU's curve can step up and then stay flat: the line makes long
drafts look dearer than they are, and a copy goes on at drafts of 1-3. So while an n-gram copy is
accepted in full, a round may draft twice the largest batch seen (at most twice the tokens copied
in a row) to find out (`_length_probe`).

A long match needs no ramp: from `long_copy` tokens on (`LONG_COPY`, longer than the quotes a
summary makes), an n-gram draft may be as long as the calibration measured batches, at once,
while the rounds agree with the calibration's shape (`_copy_limit`). Past what was measured,
and where the rounds part from it, the ramp holds.

Decisions rest on that evidence, never on one round:

- the length comes from the posterior mean a; the source is used when that pays;
- a source whose own evidence has shown it pays (`paid`) keeps drafting through a bad spell as
  long as an optimistic a (mean + `z` standard deviations) would still pay: bad luck costs a
  few shorter drafts, not the source;
- otherwise a source whose mean does not pay rests: `probe_after` rounds, twice as long each
  time it rests again without having paid in between (up to `probe_after_max`). When it comes
  back, one round adds evidence if the optimistic a would pay. A source that not even the
  optimistic a can make pay comes back with its evidence halved (`forget`), so that what no
  longer holds can be found out later.

What is paid once, before the first draft, must be earned back: a draft model behind the text
(a new prompt; rounds that n-gram lookup drafted) catches up `backlog` tokens first, at
B = catch_up(backlog). That cost is spread over the tokens the answer is still expected to
have, taken to be as many as it already has (at least `catch_up_horizon`, at most what
max_tokens leaves): a short answer never pays for a long prompt's prefill, and a long one pays it
early (the ski-rental rule: at most about twice what knowing the length in advance would cost).

The draft model also stops drafting at the first token whose probability under the draft is
below `min_confidence` (llama.cpp's p-min), the break-even point of the costs: one more draft
token is worth it when its chance of acceptance exceeds (c_draft + dV + o) / C(0), with dV the
verify cost of one more token in the batch.

Pipelined drafting (`pipelined`): the draft model's rounds can also make the next draft while
the target verifies (`specllama.policy.costs`, P_s(k)). For each acceptance the draft model's table
keeps whichever of the chain and the pipeline has the better rate; where the two models cannot
run side by side (overlap lambda >= 1, as on CPU cores) the pipeline never has, and is never
chosen.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specllama.engine.control import MODEL, MTP, NGRAM, STEPPED, SourceOption, kind_of
from specllama.engine.events import RoundEvent
from specllama.policy.costs import Costs, LiveCosts, expected_tokens

# What each source is assumed to get right before anything is observed. An n-gram match is
# judged by its length, and a short one also by whether every earlier occurrence went on the
# same way ("-mixed" when not). Measured with Qwen2.5-Coder 1.5B on the bundled prompts and 19
# from Spec-Bench (the first token after a match of N tokens is right): 1 token 33% (mixed 13%),
# 2 tokens 50-59% (mixed 11-16%), 3 70% (mixed 12-30%), 4-5 68-78%, 6-11 80-83%, 12-23 92-94%,
# 24 and more 100% (492 positions). A match shorter than MIN_MATCH is never drafted from: as
# often a coincidence as not, it lost more on the answers that do not copy than it won on those
# that do, even where verifying is cheap (replayed on the traces of both prompt sets).
PRIORS = {
    MODEL: 0.8,
    # The MTP heads of Qwen3.5/3.6 and GLM are reported at 60-80% per drafted token.
    MTP: 0.7,
    # An EAGLE-3 head: taken as an MTP head until its rounds say otherwise (nothing measured).
    "eagle3": 0.7,
    "assistant": 0.7,  # Gemma 4's assistant drafter: as an MTP head, until measured
    "ngram3": 0.7,
    "ngram3-mixed": 0.2,
    "ngram4": 0.75,
    "ngram6": 0.8,
    "ngram12": 0.92,
    "ngram24": 0.98,
}
# A draft model of another tokenizer (another family, drafting text): per drafted token it was
# accepted 0.68 where the same-vocabulary draft was 0.87 (medians over the 13 categories of the
# held-out prompts, SmolLM2-135M against Qwen2.5-Coder-0.5B for the 1.5B, fixed drafts of 4,
# research/cross_tokenizer.py). Its prior is the model's lowered alike: until its own rounds say
# more, its drafts are shorter and the n-gram lane, where it matches, goes first.
CROSS_MODEL_PRIOR = 0.6
MIN_MATCH = 3
# A match of N tokens counts in the lane of the largest of these that is at most N.
NGRAM_LANES = (1, 2, 3, 4, 6, 12, 24)
_LONG = "ngram-long"  # the key of the n-gram table past the ramp
MIXED = "-mixed"  # the suffix of a match whose earlier occurrences went on differently

# Steady state: a draft model that drafted last round has one or two tokens to evaluate (the
# target's own token, and the last draft when all were accepted), already in the cost of a round.
_ROUTINE_BACKLOG = 2
# Acceptance is looked up on a grid of this many steps. An n-gram source's is taken to be at most
# _COPY_A_MAX: a long run of accepted tokens makes its posterior nearly 1, but every copy ends
# somewhere, and a draft of 48 at "a = 1" loses most of it there.
_GRID = 100
_COPY_A_MAX = 0.99
# The length probe's odds: what a probe would save if long batches are as cheap as plausible,
# over the tokens still expected, counted at this share against what it loses if the rounds'
# line is right. Chosen on the EPYC's recorded answers under a busy calibration: at 1/2, a copy
# went on at drafts of 2 (code editing 1.35-1.46x, 1.64x with true costs); at 3/4, 1.56-1.64x;
# at 1, 1.64x, but the Spec-Bench summaries fell from 1.03x to 0.99-1.01x.
_PROBE_ODDS = 0.75
# A match at least this long drafts as far as the measured costs say at once (no ramp). Replayed
# on the recorded answers (research/RESULTS.md, issue 33): summaries quote stretches of 12-25
# tokens that then part from their source, and a 48-token draft on such a quote's 24th token
# cost Spec-Bench's summaries 8% on the EPYC; at 26 or more no category lost on any machine's
# costs, and copies of a file (or of an answer remembered, or predicted) go on far longer.
LONG_COPY = 32
# A catch-up is spread over at least this many tokens of the answer (the ski-rental rule, module
# docstring). At 8, where verifying costs little (an F16 target) a draft model that pays 1.6x
# waited 11 tokens after an 80-token prompt. It is a trade the loop cannot escape, not knowing
# where an answer ends (research/regimes.py, every prompt, the Xeon's F16 costs): 8 keeps every
# answer at 1.08x or more, 16 takes the mean over categories from 0.92 to 0.94 of the best fixed
# choice (extraction of 23-31 tokens 0.61 -> 0.91) and answers of 6-10 tokens to 0.71x.
CATCH_UP_HORIZON = 16
# Beside other slots, a draft must beat the target's rate by this much more than alone. Its
# rate counts its own tokens; but a slot that drafts finishes early and narrows the batch,
# whose other tokens then cost more (four slots to three on the 2-core EPYC: 37.5 -> 43 ms a
# token). Where a drafted token costs about what a step's own token does (four slots there: 39
# against 42 ms), a copy's drafts made its own tokens ~4% cheaper and the phase longer
# (traced: 16 drafted steps, 2.4 s of a 32 s phase; research/batch_bound.py finds no schedule
# that beats plain batching there). Where the batch has slack (eight slots there, a GPU)
# drafts gain far more.
BATCH_MARGIN = 0.10


def _draft_steps(round_: RoundEvent) -> int:
    """The draft decodes of a round (`draft_chain`): one reads the first token's logits, then
    one per token drafted but the last; a draft stopped short of the k asked for (an
    unconfident token) also decoded the token it stopped after. Counted as n_drafted alone,
    the stops made a draft step look up to twice what it is, and the draft model dearer."""
    stopped = round_.n_drafted < round_.k
    return max(round_.n_drafted + stopped, 1)


def match_length(source: str) -> int:
    """N of an n-gram source's name, "ngramN" or "ngramN-mixed" (3 when it gives none)."""
    return int(source[len(NGRAM) :].removesuffix(MIXED) or 3)


@functools.lru_cache(maxsize=256)  # a few names, asked for several times a round
def lane_of(source: str) -> str:
    """The controller's statistics key for a source name: "ngramN" (a match of N tokens) is
    bucketed by NGRAM_LANES (1, 2, 3, 4-5, 6-11, 12-23, 24+), a mixed one as such up to 3;
    other names are their own key."""
    if not source.startswith(NGRAM):
        return source
    lane = max(b for b in NGRAM_LANES if b <= max(match_length(source), 1))
    return f"{NGRAM}{lane}{MIXED if source.endswith(MIXED) and lane <= 3 else ''}"


def _too_short(source: str) -> bool:
    lane = lane_of(source)
    return lane.startswith(NGRAM) and match_length(lane) < MIN_MATCH


@dataclass
class _Source:
    """What the controller knows about one source of drafts."""

    lane: str
    kind: str  # MODEL, MTP or NGRAM: what its rounds cost
    prior: float
    weight: float  # what the prior is worth, in tokens
    hits: float = 0.0  # accepted draft tokens (faded)
    misses: float = 0.0  # first rejections (faded)
    off_until: int = 0  # rests until this round
    pause: int = 0  # the next rest when it goes off
    paid: bool = False  # has paid since it last went off
    back: bool = False  # has rested, and not been probed since
    history: list[int] = field(default_factory=list)  # rests taken (for tests and reports)

    def posterior(self) -> tuple[float, float]:
        """Mean and standard deviation of the acceptance."""
        n = self.hits + self.misses + self.weight
        mean = (self.hits + self.prior * self.weight) / n
        return mean, math.sqrt(mean * (1.0 - mean) / (n + 1.0))


class _RateTable:
    """Best draft length and its rate (tokens/s) for each acceptance on a grid, for one kind of
    source, at the current costs: one lookup a round instead of a search. For the draft model,
    also whether that best is a pipelined round (`pipelined_at`)."""

    def __init__(self, live: LiveCosts, kind: str, k_max: int) -> None:
        a = np.linspace(0.0, 1.0, _GRID + 1)[:, None]
        k = np.arange(k_max + 1)[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            tokens = np.where(a < 1.0, (1.0 - a ** (k + 1)) / (1.0 - a), k + 1.0)
        cost = live.rounds(kind, k_max)
        rates = tokens / cost
        rates[:, 0] = 0.0  # a source is asked for at least one token
        self.kind = kind
        self.k_max = k_max
        self.k = rates.argmax(axis=1)
        self.rate = rates.max(axis=1)
        self.pipelined = np.zeros(len(self.k), dtype=bool)
        if kind == MODEL and live.overlap < 1.0:
            self._add_pipelined(live, a, k, tokens)
        self.version = live.version

    def _add_pipelined(
        self, live: LiveCosts, a: np.ndarray, k: np.ndarray, tokens: np.ndarray
    ) -> None:
        """Where a pipelined round of some length beats the best chain, take it."""
        survive = a ** (k + 1)  # all k drafts and the guess for the target's token right
        both, serial, python = np.array([live.pipelined_parts(n) for n in range(k.shape[1])]).T
        rates = tokens / (survive * both + (1.0 - survive) * serial + python)
        rates[:, 0] = 0.0
        better = rates.max(axis=1) > self.rate
        self.k = np.where(better, rates.argmax(axis=1), self.k)
        self.rate = np.where(better, rates.max(axis=1), self.rate)
        self.pipelined = better

    def at(self, a: float) -> tuple[int, float]:
        i = self._index(a)
        return int(self.k[i]), float(self.rate[i])

    def pipelined_at(self, a: float) -> bool:
        return bool(self.pipelined[self._index(a)])

    def _index(self, a: float) -> int:
        if self.kind == NGRAM:
            a = min(a, _COPY_A_MAX)
        return min(max(round(a * _GRID), 0), _GRID)

    def break_even(self, worth: float) -> float | None:
        """The lowest acceptance at which the best length beats the rate `worth`."""
        above = np.flatnonzero(self.rate > worth)
        return above[0] / _GRID if len(above) else None


class AdaptiveController:
    """Choose the draft source and length with the best expected rate (module docstring).

    `draft_max` caps the draft model; n-gram drafts cost nothing to make and go up to
    `ngram_max`.
    """

    def __init__(
        self,
        costs: Costs,
        *,
        draft_max: int = 16,
        ngram_max: int = 48,
        memory: float = 0.97,
        prior_weight: float = 2.0,
        model_prior_weight: float = 3.0,
        z: float = 1.0,
        forget: float = 0.5,
        margin: float = 0.02,
        probe_after: int = 16,
        probe_after_max: int = 512,
        min_horizon: int = 8,
        catch_up_horizon: int = CATCH_UP_HORIZON,
        probe_loss: float = 1.0,
        priors: dict[str, float] | None = None,
        long_copy: int | None = LONG_COPY,
        hindsight: bool = True,
    ) -> None:
        self.costs = costs
        self.live = LiveCosts(costs)
        self.memory = memory
        self.prior_weight = {
            NGRAM: prior_weight,
            MODEL: model_prior_weight,
            MTP: model_prior_weight,
        }
        self.z = z
        self.forget = forget
        self.margin = margin
        self.probe_after = probe_after
        self.probe_after_max = probe_after_max
        self.min_horizon = min_horizon
        self.catch_up_horizon = catch_up_horizon
        self.probe_loss = probe_loss
        self.k_max = {
            MODEL: max(1, draft_max),
            MTP: max(1, draft_max),
            NGRAM: max(1, ngram_max, draft_max),
        }
        self.priors = {**PRIORS, **(priors or {})}
        self.long_copy = long_copy  # None: every draft ramps
        self.hindsight = hindsight  # lookups passed over count as evidence
        self.sources: dict[str, _Source] = {}
        self.round = 0
        self._tables: dict[str, _RateTable] = {}
        self._backlog = 0  # the backlog of the source chosen for the round under way
        self.pipelined = False  # the round under way makes its next draft while verifying
        self._plain_seen = False  # a round of the target alone has been observed
        self._copied = 0  # n-gram draft tokens accepted in a row, over rounds accepted in full
        self.min_confidence = self._break_even_confidence()

    def source(self, name: str) -> _Source:
        """The statistics of a source (created on first sight, from its prior)."""
        lane = lane_of(name)
        if lane not in self.sources:
            prior = self.priors.get(lane, 0.5)
            kind = kind_of(lane)
            weight = self.prior_weight[kind]
            self.sources[lane] = _Source(lane, kind, prior, weight, pause=self.probe_after)
        return self.sources[lane]

    def acceptance(self, name: str) -> float:
        return self.source(name).posterior()[0]

    def table(self, kind: str) -> _RateTable:
        k_max = min(self.k_max[kind], self.live.draft_limit())
        table = self._tables.get(kind)
        if table is None or table.version != self.live.version or table.k_max != k_max:
            table = self._tables[kind] = _RateTable(self.live, kind, k_max)
            self.min_confidence = self._break_even_confidence()
        return table

    def _long_table(self, k_max: int) -> _RateTable:
        """The n-gram table up to `k_max`, past the ramp's limit (`_copy_limit`)."""
        table = self._tables.get(_LONG)
        if table is None or table.version != self.live.version or table.k_max != k_max:
            table = self._tables[_LONG] = _RateTable(self.live, NGRAM, k_max)
        return table

    def ngram_length(self, name: str, mean: float) -> tuple[int, float]:
        """The best draft length of n-gram source `name` at acceptance `mean`, and its rate
        (tokens/s), as far as `_copy_limit` allows."""
        table = self.table(NGRAM)
        limit = self._copy_limit(match_length(name))
        return (table if limit <= table.k_max else self._long_table(limit)).at(mean)

    def _copy_limit(self, match: int) -> int:
        """The longest n-gram draft after a match this long: the ramp's (`LiveCosts.
        draft_limit`), or for a long copy, the largest batch the calibration measured (less the
        target's own token) while the rounds agree with its shape."""
        ramp = self.table(NGRAM).k_max
        if self.long_copy is None or match < self.long_copy:
            return ramp
        curve = self.live.verify_curve
        if not self.costs.measured or curve.doubtful or not curve.shape_holds:
            return ramp
        return max(ramp, min(self.k_max[NGRAM], self.costs.verify_s[-1][0] - 1))

    def best_length(self, name: str, a: float) -> tuple[int, float]:
        """The best draft length at acceptance `a`, and its speedup over the target alone."""
        k, rate = self.table(kind_of(lane_of(name))).at(a)
        return k, rate * self.live.plain()

    # -- the protocol -----------------------------------------------------------------------

    def choose(
        self, options: Sequence[SourceOption], *, remaining: int, generated: int = 0
    ) -> tuple[str, int]:
        self.pipelined = False
        if not self._plain_seen:
            # What the target alone costs is what every choice is weighed against: see it
            # once before believing the calibration's word on anything else.
            return "", 0
        # The rate to beat: the target alone's, by the margin (more beside other slots).
        margin = self.margin + (BATCH_MARGIN if self.live.batch_price is not None else 0.0)
        worth = (1.0 + margin) / self.live.plain()
        horizon = max(min(remaining, max(generated, self.min_horizon)), 1)  # tokens still expected
        best: tuple[str, int] = ("", 0)
        best_rate = worth
        best_mean = 0.0
        best_source: _Source | None = None
        self._backlog = 0
        for name, backlog in options:
            if _too_short(name):
                continue
            source = self.source(name)
            table = self.table(source.kind)
            mean, sd = source.posterior()
            k, rate = self.ngram_length(name, mean) if source.kind == NGRAM else table.at(mean)
            # A resting n-gram lane is back as soon as what it would have proposed meanwhile
            # (hindsight) says it pays: its rest spares rounds to learn from, not evidence.
            resting = self.round < source.off_until
            if resting and not (source.kind == NGRAM and self.hindsight and rate > worth):
                continue
            catch_up = 0.0
            if source.kind in STEPPED and backlog > _ROUTINE_BACKLOG:
                catch_up = self.live.catch_up(backlog - _ROUTINE_BACKLOG)
            if rate > worth:
                # It pays; a catch-up first is spread over the tokens still expected.
                tokens = expected_tokens(mean, k)
                spread = max(min(remaining, max(generated, self.catch_up_horizon)), 1)
                rate = tokens / (tokens / rate + catch_up * tokens / spread)
            elif self._worth_learning(table, mean, sd, k, catch_up, horizon, worth, source):
                rate = worth * 1.001  # a round to learn from, after every source that pays
            else:
                optimistic = table.at(min(mean + self.z * sd, 1.0))[1]
                self._rest(source, forget=optimistic <= worth)
                continue
            if rate > best_rate:
                best, best_rate, best_mean, self._backlog = (name, k), rate, mean, backlog
                best_source = source
        if best_source is not None and best_source.kind == NGRAM:
            best = (best[0], self._length_probe(best[1], best_mean, best_rate, horizon))
        self.pipelined = bool(best[1]) and self.table(kind_of(best[0])).pipelined_at(best_mean)
        return best

    def _worth_learning(
        self,
        table: _RateTable,
        mean: float,
        sd: float,
        k: int,
        catch_up: float,
        horizon: int,
        worth: float,
        source: _Source,
    ) -> bool:
        """Is a round of a source that does not pay as far as is known worth its cost for what
        it tells? Only if the optimistic acceptance would pay. A source back from a rest gets
        one round, its probe, when that loses at most `probe_loss` target tokens (catch-up
        included), so that one unlucky round early in an answer does not cost the rest of it;
        after that it must pay on its own. One that never rested gets rounds while the chance
        that it pays after all, times what it would then save over the tokens still expected,
        exceeds what the round loses."""
        optimistic = table.at(min(mean + self.z * sd, 1.0))[1]
        break_even = table.break_even(worth)
        if optimistic <= worth or break_even is None:
            return False
        plain = self.live.plain()
        loss = catch_up + self.live.round(table.kind, k) - expected_tokens(mean, k) * plain
        if source.history:
            probe, source.back = source.back and loss <= self.probe_loss * plain, False
            return probe
        chance = 0.5 * math.erfc((break_even - mean) / (sd * math.sqrt(2.0)))
        return chance * horizon * (plain - 1.0 / optimistic) > loss

    def _length_probe(self, k: int, mean: float, rate: float, horizon: int) -> int:
        """The n-gram draft length to use instead of the best `k` (at `rate`), to learn what a
        batch twice the largest seen costs, where the calibration's shape is not trusted and the
        rounds' straight line may make long drafts look dearer than they are. Taken when, if
        the batch costs as little as is plausible, what that would save over the tokens still
        expected (at `_PROBE_ODDS`) exceeds what the round loses if the line is right."""
        live = self.live
        longer = min(2 * live.verify_curve.largest - 1, 2 * self._copied, self.table(NGRAM).k_max)
        if longer <= k:
            return k
        tokens = expected_tokens(min(mean, _COPY_A_MAX), longer)
        hoped = tokens / live.optimistic_round(NGRAM, longer)
        if hoped <= rate * (1.0 + self.margin):
            return k
        loss = live.round(NGRAM, longer) - tokens / rate
        gain = _PROBE_ODDS * horizon * (1.0 / rate - 1.0 / hoped)
        return longer if gain > loss else k

    def _rest(self, source: _Source, *, forget: bool) -> None:
        """Leave `source` out for its pause (twice as long each time it rests again without
        having paid in between); when it comes back, its next round is drafted. `forget`
        halves its evidence, so that a source found not to pay can be found to pay later."""
        if source.paid:
            source.pause, source.paid = self.probe_after, False
        source.off_until = self.round + source.pause
        source.back = True
        source.history.append(source.pause)
        source.pause = min(2 * source.pause, self.probe_after_max)
        if forget:
            source.hits *= self.forget
            source.misses *= self.forget

    def in_batch(self, price: tuple[float, float] | None) -> None:
        self.live.in_batch(price)

    def observe(self, round_: RoundEvent) -> None:
        self.round += 1
        self._plain_seen |= not round_.n_drafted
        self._learn_costs(round_)
        copied = kind_of(round_.source) == NGRAM and 0 < round_.n_drafted == round_.n_accepted
        self._copied = self._copied + round_.n_accepted if copied else 0
        if round_.hindsight and round_.hindsight_seen and self.hindsight:
            right, seen = round_.hindsight_right, round_.hindsight_seen
            self._count(self.source(round_.hindsight), right, right < seen, seen)
        if not round_.source:
            return
        seen = round_.n_accepted + (round_.n_accepted < round_.n_drafted)
        # A draft that was rejected at its first token, or that the draft model did not dare
        # (it stopped at once), is a failure.
        failed = round_.n_accepted < max(round_.n_drafted, 1)
        self._count(self.source(round_.source), round_.n_accepted, failed, seen)

    def _count(self, source: _Source, right: int, failed: bool, seen: int) -> None:
        """Add a round's evidence on `source`: `right` tokens in a row, then a failure or not,
        of `seen` tokens checked; older evidence fades by `memory` per token seen."""
        fade = self.memory ** max(seen, 1)
        source.hits = source.hits * fade + right
        source.misses = source.misses * fade + failed
        # It has paid once its own evidence, not the prior, says so.
        mean, _ = source.posterior()
        evidence = source.hits + source.misses >= 3 * source.weight
        if evidence and self.table(source.kind).at(mean)[1] * self.live.plain() > 1 + self.margin:
            source.paid = True

    def _learn_costs(self, round_: RoundEvent) -> None:
        if round_.n_ahead or round_.carried:
            span = round_.target_s + round_.wait_s
            self.live.learn_pipelined(
                round_.n_drafted, round_.n_ahead, round_.draft_s, span, round_.wall_s
            )
            return
        kind = kind_of(round_.source)
        routine = kind in STEPPED and self._backlog <= _ROUTINE_BACKLOG
        steps = _draft_steps(round_) if routine else 0
        self.live.learn(
            kind, round_.n_drafted, steps, round_.draft_s, round_.target_s, round_.wall_s
        )

    def _break_even_confidence(self) -> float:
        live = self.live
        dv = (live.verify(4) - live.verify(2)) / 2
        extra = live.draft_step() + dv + live.overhead[MODEL].per_row
        return min(max(extra / live.plain(), 0.3), 0.9)
