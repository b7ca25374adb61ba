"""A prompt cache in RAM: the KV state of recent conversations, so that a request whose prompt
begins as an earlier one did (an agent's main conversation after a side request; one client
among several) evaluates only what is new.

Each slot's sequence holds the conversation it answered last (the queue gives a request to the
free slot that holds the most of it). Before a request runs, the longest prefix of its prompt
held anywhere wins. A request that would throw away more than MIN_TOKENS of what its slot holds
has that state saved first (the conversation may come back); a saved state that holds more of
the prompt than the slot does (by MIN_TOKENS) is then loaded, into whichever slot runs it. The
target's state and the draft model's are saved together; the drafters catch up on what they
lack, as they do after any rollback.

Saved states are kept by recency within a bound in bytes (--cache-ram); one that would not fit
alone is not copied at all (its size is measured first; the log says so once), and one that a
newer state extends is dropped. A failure to save or load
costs the reuse, never the request. Draft heads (MTP, EAGLE-3, DFlash, Gemma 4's assistant)
read the target's hidden rows as it decodes them, which a loaded state does not bring back, and
a recurrent target cannot be cut back to any prefix: with those the cache is off.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from specllama.llama.evaluated import SavedState, common_prefix_length
from specllama.session import Engine

log = logging.getLogger("specllama.server.app")

# Tokens a state must hold, or a load must gain, to be worth its copy (tens of MB a thousand
# tokens on a 1.5B model; a copy costs a few ms where evaluating the tokens costs seconds).
MIN_TOKENS = 32


@dataclass
class Entry:
    target: SavedState
    draft: SavedState | None  # the draft model's, when one is loaded

    @property
    def tokens(self) -> tuple[int, ...]:
        return self.target.tokens

    @property
    def size(self) -> int:
        return self.target.size + (self.draft.size if self.draft is not None else 0)


def unusable(engine: Engine) -> str | None:
    """Why the cache cannot serve this engine (None: it can)."""
    if engine.mtp_head is not None or engine.head is not None:
        return "a draft head reads the target's hidden rows, which a saved state lacks"
    if engine.target.recurrent or (engine.draft_model and engine.draft_model.recurrent):
        return "a model has recurrent layers, which cannot be cut back to any prefix"
    return None


class PromptCache:
    def __init__(self, engine: Engine, limit_bytes: int) -> None:
        self._engine = engine
        self.limit = limit_bytes if unusable(engine) is None else 0
        self._entries: list[Entry] = []  # least recently used first
        self.loads = 0  # requests that got their prefix from a saved state
        self._lock = threading.Lock()  # a server's slots restore from their own threads
        self._said_too_big = False  # the log says once that a state did not fit

    @property
    def used(self) -> int:
        return sum(entry.size for entry in self._entries)

    def facts(self) -> dict[str, int]:
        """What /health shows of it."""
        return {
            "entries": len(self._entries),
            "bytes": self.used,
            "limit_bytes": self.limit,
            "loads": self.loads,
        }

    def restore(self, prompt: list[int], slot: Engine | None = None) -> None:
        """Before `prompt` runs (on `slot`, a server slot's view of the engine; default: the
        engine itself): save what it would throw away, and load the saved state that holds the
        most of it, when that beats what the slot's contexts hold."""
        if self.limit <= 0:
            return
        with self._lock:
            self._restore(prompt, slot or self._engine)

    def _restore(self, prompt: list[int], slot: Engine) -> None:
        target = slot.target
        here = target.common_prefix(prompt)
        if target.n_past - here > MIN_TOKENS:
            try:
                self._save(slot)
            except Exception as exc:  # a cache never fails a request
                log.warning("the prompt cache could not save a state: %s", exc)
        if not self._entries:
            return
        best = max(self._entries, key=lambda e: common_prefix_length(e.tokens, prompt))
        if common_prefix_length(best.tokens, prompt) >= here + MIN_TOKENS:
            self._load(best, slot)

    def _save(self, slot: Engine) -> None:
        target, draft = slot.target, slot.draft_model
        held = tuple(target.tokens)
        for entry in self._entries:
            if entry.tokens[: len(held)] == held:  # saved already, or within a longer one
                self._touch(entry)
                return
        size = target.state_size() + (draft.state_size() if draft is not None else 0)
        if size > self.limit:  # measured, not copied: a copy would be thrown away at once
            self._say_too_big(len(held), size)
            return
        entry = Entry(target.save_state(), draft.save_state() if draft is not None else None)
        # A state this one extends holds nothing more: this one serves its prompts too.
        self._entries = [e for e in self._entries if held[: len(e.tokens)] != e.tokens]
        self._entries.append(entry)
        while self.used > self.limit:
            self._entries.pop(0)

    def _say_too_big(self, n_tokens: int, size: int) -> None:
        if self._said_too_big:
            return
        self._said_too_big = True
        log.warning(
            "the prompt cache keeps no state of %d tokens: it takes %d MB, more than its bound "
            "of %d MB (--cache-ram); such conversations are evaluated again when they come back",
            n_tokens,
            size // 2**20,
            self.limit // 2**20,
        )

    def _load(self, entry: Entry, slot: Engine) -> None:
        target, draft = slot.target, slot.draft_model
        self._touch(entry)
        try:
            loaded = target.load_state(entry.target)
            drafted = draft is None or (entry.draft is not None and draft.load_state(entry.draft))
            if not drafted:  # the draft model evaluates the prompt itself
                draft.rollback(0)
        except Exception as exc:
            log.warning("the prompt cache could not load a state: %s", exc)
            loaded = False
        if loaded:
            self.loads += 1
        else:  # the contexts start empty: the request evaluates its prompt
            self._entries.remove(entry)
            target.rollback(0)

    def _touch(self, entry: Entry) -> None:
        self._entries.remove(entry)
        self._entries.append(entry)
