"""Stop strings over streamed text: stop at the first one, never emit it.

A stop string can arrive split over several tokens ("\\n\\nUser" as "\\n", "\\n", "User"), so
text that could be the start of one is held back until the next piece tells whether it is.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the text

    def feed(self, text: str) -> str:
        """The new text that is safe to emit: everything before a stop string, less what
        could still turn out to be the beginning of one."""
        if self.stopped:
            return ""
        text = self._held + text
        found = [(at, stop) for stop in self._stops if (at := text.find(stop)) >= 0]
        if found:
            at, self.matched = min(found, key=lambda hit: hit[0])
            self.stopped = True
            self._held = ""
            return text[:at]
        keep = self._partial_stop_length(text)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """What was held back, once the text has ended without completing a stop string."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_stop_length(self, text: str) -> int:
        """The length of the longest end of `text` that some stop string starts with."""
        longest = max((len(s) for s in self._stops), default=0)
        for n in range(min(len(text), longest - 1), 0, -1):
            tail = text[-n:]
            if any(stop.startswith(tail) for stop in self._stops):
                return n
        return 0
