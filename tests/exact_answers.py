"""Answers of one target under several drafters, in a process of their own (for test_exact.py).

Exact mode is chosen once per process (ggml reads GGML_CPU_TILED_MM once), and the pytest
process has loaded models without it: so the exact answers are written here, in a subprocess.

    python tests/exact_answers.py SPEC.json    (SPEC: what `answers` takes, as JSON)

prints one JSON object: {config name: [[tokens of each prompt x sampling], ...]}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from specllama.chat import Message
from specllama.engine.events import TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.session import Engine, EngineConfig

# name -> (drafter, adaptive, uses the draft model's file)
CONFIGS = {
    "none": ("none", False, False),
    "model-fixed-k4": ("model", False, True),  # --drafter model --fixed --draft-max 4
    "ngram": ("ngram", True, False),
    "default": ("model", True, True),  # adaptive: n-gram first, then the draft, pipelined
}


def answers(spec: dict[str, Any]) -> dict[str, list[list[int]]]:
    """For each config in spec["configs"]: the tokens of each (prompt, sampling) pair, prompts
    outer. A prompt is {"text": ..., "template": bool}; a sampling [temperature, seed]."""
    found = {}
    for name in spec["configs"]:
        drafter, adaptive, uses_draft = CONFIGS[name]
        config = EngineConfig(
            target=Path(spec["target"]),
            draft=Path(spec["draft"]) if uses_draft else None,
            drafter=drafter,
            draft_max=4,
            n_ctx=1024,
            n_threads=2,
            adaptive=adaptive,
            exact=spec["exact"],
        )
        with Engine(config) as engine:
            if adaptive:
                engine.calibrate()
            found[name] = [
                _tokens(engine, prompt, temperature, seed, spec["max_tokens"])
                for prompt in spec["prompts"]
                for temperature, seed in spec["samplings"]
            ]
    return found


def _tokens(
    engine: Engine, prompt: dict[str, Any], temperature: float, seed: int, max_tokens: int
) -> list[int]:
    tokens = engine.prompt_tokens(
        [Message("user", prompt["text"])], chat_template=prompt["template"]
    )
    params = SamplingParams(temperature, 40, 1.0, 0.0, seed)
    events = engine.generate(tokens, params, max_tokens=max_tokens)
    return [event.token for event in events if isinstance(event, TokenEvent)]


if __name__ == "__main__":
    print(json.dumps(answers(json.loads(Path(sys.argv[1]).read_text()))))
