"""The session: a draft/target pair loaded once, that generates from prompts or conversations
(`pair.Engine`): what the faces (run, chat, bench, the server) share.

One module each: what a pair is loaded with (`config`), which drafter it drafts with
(`drafter_choice`), how many slots a server runs (`default_slots`), its prompts and thinking
(`prompts`), and the loaded pair (`pair`).

May import the top-level modules, `family`, `llama`, `engine`, `policy` and `models`; the faces
(`cli`, `server`, `bench`) import it, never the other way.
"""

from specllama.session.config import ADAPTIVE_DRAFT_MAX, EngineConfig, check_draft_max
from specllama.session.default_slots import DEFAULT_SLOTS, auto_slots
from specllama.session.drafter_choice import (
    check_drafter,
    default_drafter,
    head_kind,
    mtp_problem,
)
from specllama.session.pair import Engine
from specllama.session.prompts import prompt_tokens

__all__ = [
    "ADAPTIVE_DRAFT_MAX",
    "DEFAULT_SLOTS",
    "Engine",
    "EngineConfig",
    "auto_slots",
    "check_draft_max",
    "check_drafter",
    "default_drafter",
    "head_kind",
    "mtp_problem",
    "prompt_tokens",
]
