"""The client's own prediction of the answer (OpenAI's "Predicted Outputs"), as a draft.

An editor asking for a file to be rewritten with a small change sends the file as the answer
it expects. While the answer so far is the prediction's beginning, the rest of the prediction
is the draft, from the first round; once the answer has gone its own way, the prediction is
searched like a memory (`TokenMemory`) for the answer's last tokens, so that a copy picks up
again after the change.

What it drafted is settled against what the target kept, as OpenAI reports it: accepted
prediction tokens (drafted from the prediction and kept) and rejected ones (drafted from it and
thrown away by the verify).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from specllama.engine.memory import KEY, MAX_MATCH, TokenMemory

# An answer still on its prediction is as sure as a copy after the longest match: the client said
# so, and the policy drafts as long as the costs allow from such evidence at once
# (`specllama.policy.controller.LONG_COPY`).
ALIGNED_EVIDENCE = MAX_MATCH


class Prediction:
    def __init__(self, tokens: Sequence[int], answer_start: int) -> None:
        self.tokens = list(tokens)
        self.answer_start = answer_start
        self._memory = TokenMemory(max_tokens=len(self.tokens) + 2 * KEY + 2)
        self._memory.add(self.tokens)
        self.accepted = 0
        self.rejected = 0
        self._drafted: tuple[int, list[int]] | None = None  # (position, tokens) unsettled

    def match(self, context: Sequence[int]) -> tuple[int, list[int]] | None:
        """(evidence, what the prediction says follows `context`), or None. The evidence is
        a match length: ALIGNED_EVIDENCE or more while the answer is the prediction's start."""
        self.settle(context)
        answer = list(context[self.answer_start :])
        if answer == self.tokens[: len(answer)]:
            rest = self.tokens[len(answer) :]
            return (max(ALIGNED_EVIDENCE, len(answer)), rest) if rest else None
        found = self._memory.longest_match(context)
        if found is None:
            return None
        return found.length, self._memory.continuation(found, len(self.tokens))

    def drafted(self, position: int, tokens: list[int]) -> None:
        """A draft from the prediction goes to verify at `position`."""
        self._drafted = (position, list(tokens))

    def settle(self, context: Sequence[int]) -> None:
        """Count the last draft kept as far as `context` has it, the rest rejected."""
        if self._drafted is None:
            return
        position, tokens = self._drafted
        kept = 0
        while kept < len(tokens) and position + kept < len(context):
            if context[position + kept] != tokens[kept]:
                break
            kept += 1
        self.accepted += kept
        self.rejected += len(tokens) - kept
        self._drafted = None


def predicted_in(prediction: Sequence[int], completion: Sequence[int]) -> int:
    """How many of the prediction's tokens appear in the completion, in order: OpenAI's
    `accepted_prediction_tokens`, whatever drafted them (a diff's matching blocks; the memory
    may have drafted the answer before the prediction could)."""
    matcher = difflib.SequenceMatcher(None, list(prediction), list(completion), autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks())
