"""The llama.cpp library as loaded: what this build says it can do."""

from __future__ import annotations

from specllama.llama.library import build_facts


def test_build_facts():
    facts = build_facts()
    assert facts.version.count(".") == 2
    assert isinstance(facts.gpu_offload, bool)
    assert facts.library and facts.build_id["version"] == facts.version
