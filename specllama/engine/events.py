"""What the speculative loop yields: a token, a round, the end. The faces subscribe to these."""

from __future__ import annotations

from dataclasses import dataclass

from specllama.engine.stats import GenerationStats


@dataclass(frozen=True)
class TokenEvent:
    token: int
    from_draft: bool  # True: a draft token the target accepted; False: the target's own choice


@dataclass(frozen=True)
class RoundEvent:
    n_drafted: int
    n_accepted: int
    draft_s: float  # time in the draft's decode this round
    target_s: float  # time in the target's verify decode this round
    source: str = ""  # who was asked to draft ("model", "ngramN"; "" when nobody was asked)
    wall_s: float = 0.0  # the whole round, from choosing what to draft to the rollback
    k: int = 0  # the draft length the controller chose (the drafter may have stopped sooner)
    # Pipelined drafting: the draft was made during the last round's verify (draft_s is then 0);
    # n_ahead tokens were drafted beside this round's verify, in ahead_s of the draft's decode
    # time, and the loop waited wait_s for them after verifying.
    carried: bool = False
    n_ahead: int = 0
    ahead_s: float = 0.0
    wait_s: float = 0.0
    # Hindsight: the n-gram source offered but not drafted from ("" when none was), and how
    # many of the emitted tokens it would have proposed in a row, of the `hindsight_seen` it
    # could be checked against. Free evidence: a lookup costs nothing to make.
    hindsight: str = ""
    hindsight_right: int = 0
    hindsight_seen: int = 0


@dataclass(frozen=True)
class FinishEvent:
    reason: str  # "stop" (end-of-generation token), "length" (max_tokens), "context" (full)
    stats: GenerationStats


Event = TokenEvent | RoundEvent | FinishEvent
