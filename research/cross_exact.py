#!/usr/bin/env python3
"""Drafting across tokenizers, exact on every held-out prompt (issue 54): a real draft of another
vocabulary for the F32 test target, greedy, against the target alone, token for token.

    python research/cross_exact.py --draft ~/.cache/specllama/models/qwen2.5-coder-0.5b-*/*.gguf

The target is the F32 SmolLM2-135M the tests build (~/.cache/specllama-tests; --target for
another); the draft proposes text in its own tokens (Qwen2.5's byte-level BPE here), re-tokenised
into SmolLM2's. Each prompt of research/held_out_prompts.jsonl runs through SmolLM2's chat
template (as `specllama run` renders it), -n tokens, drafts of --k. Printed per prompt: equal or
where the texts part, and the acceptance; then the totals.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specllama.chat import Message, render_chat
from specllama.engine.control import FixedLength
from specllama.engine.cross_drafter import CrossTokenizerDrafter
from specllama.engine.drafters import NoDrafter
from specllama.engine.events import FinishEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.llama.backend import LlamaBackend

HERE = Path(__file__).resolve().parent
TEST_TARGET = Path.home() / ".cache/specllama-tests/SmolLM2-135M-Instruct.F32.gguf"


def tokens_of(target, drafter, prompt, n: int, k: int):
    tokens, stats = [], None
    events = generate(
        target, drafter, prompt, SamplingParams(), max_tokens=n, controller=FixedLength(k)
    )
    for event in events:
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
        elif isinstance(event, FinishEvent):
            stats = event.stats
    return tokens, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--target", type=Path, default=TEST_TARGET)
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    prompts = [json.loads(line) for line in (HERE / "held_out_prompts.jsonl").open()]
    equal = drafted = accepted = 0
    with (
        LlamaBackend(args.target, n_ctx=2048, n_threads=args.threads) as target,
        LlamaBackend(args.draft, n_ctx=2048, n_threads=args.threads) as draft,
    ):
        for item in prompts:
            turns = item.get("messages") or [{"role": "user", "content": item["prompt"]}]
            messages = [Message(turn["role"], turn["content"]) for turn in turns]
            text = render_chat(target.chat_template, messages)
            prompt = target.tokenize(text, add_bos=False)
            alone, _ = tokens_of(target, NoDrafter(), prompt, args.n, args.k)
            crossed, stats = tokens_of(
                target, CrossTokenizerDrafter(draft, target), prompt, args.n, args.k
            )
            same = crossed == alone
            equal += same
            drafted += stats.n_drafted
            accepted += stats.n_accepted
            parted = next((i for i, (a, b) in enumerate(zip(alone, crossed)) if a != b), None)
            verdict = "equal" if same else f"PARTS at token {parted}"
            rate = stats.n_accepted / max(stats.n_drafted, 1)
            print(f"{item['id']:<24} {verdict:<20} accepted {rate:4.0%} of {stats.n_drafted}")
    print(f"\n{equal}/{len(prompts)} equal to the target alone; accepted {accepted}/{drafted}")


if __name__ == "__main__":
    main()
