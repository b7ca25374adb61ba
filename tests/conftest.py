"""Shared fixtures: real GGUF models (built once, cached) and loaded backends."""

from __future__ import annotations

from pathlib import Path

import model_factory
import pytest


@pytest.fixture(scope="session")
def smol_q4() -> Path:
    """SmolLM2-135M-Instruct Q4_1 as published."""
    return model_factory.smollm2_q4()


@pytest.fixture(scope="session")
def smol_f32() -> Path:
    """The same model in F32: the strict target."""
    return model_factory.smollm2_f32()


@pytest.fixture(scope="session")
def smol_draft() -> Path:
    """The first 4 layers of the F32 model: a draft that is right only some of the time."""
    return model_factory.smollm2_f32_layers(4)


@pytest.fixture(scope="session")
def smol_2layers() -> Path:
    """The first 2 layers of the F32 model."""
    return model_factory.smollm2_f32_layers(2)


@pytest.fixture(scope="session")
def smol_bad_vocab() -> Path:
    """A 2-layer copy whose token model_factory.CHANGED_TOKEN_ID has different text."""
    return model_factory.smollm2_changed_vocab()


@pytest.fixture(scope="session")
def smol_q4_bad_vocab() -> Path:
    """The Q4_1 file with the same token changed: a good draft of another vocabulary."""
    return model_factory.smollm2_q4_changed_vocab()


@pytest.fixture(scope="session")
def qwen2_vocab_tiny() -> Path:
    """A tiny synthetic llama with Qwen2's real tokenizer (byte-level BPE, 151,936 tokens)."""
    import vocab_models

    return vocab_models.tiny_with_vocab("qwen2")


@pytest.fixture(scope="session")
def spm_vocab_tiny() -> Path:
    """A tiny synthetic llama with Llama 2's real SentencePiece tokenizer."""
    import vocab_models

    return vocab_models.tiny_with_vocab("llama-spm")


@pytest.fixture(scope="session")
def session_calibrations(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("calibration")


@pytest.fixture(autouse=True)
def calibrations_kept_apart(request: pytest.FixtureRequest, session_calibrations: Path):
    """Calibrations the tests measure (small models, timed beside other tests) go to one folder
    of the session, never the user's cache, so that a pair is measured once, as for a user; and
    a measurement that fails its checks is not measured again (on a busy test machine many fail,
    and took three or four tries: calibrating was a third of the bench and CLI tests' time). A test
    marked `own_calibrations` (one that checks what is measured, retried and cached) keeps them
    under its SPECLLAMA_CACHE with the retries, as a user's run does."""
    from specllama import paths
    from specllama.policy import calibration

    with pytest.MonkeyPatch.context() as patch:
        if request.node.get_closest_marker("own_calibrations"):
            users = paths.cache_dir()  # the user's unless the test points SPECLLAMA_CACHE away

            def own_dir() -> Path:
                here = paths.cache_dir()
                return session_calibrations / "own" if here == users else here / "calibration"

            patch.setattr(calibration, "calibration_dir", own_dir)
        else:
            patch.setattr(calibration, "calibration_dir", lambda: session_calibrations)
            patch.setattr(calibration, "RETRY_WITHIN_S", 0.0)  # one try
        yield


def pytest_report_header() -> str:
    from rpc_workers import HAS_RPC, NO_RPC

    return "rpc: this llama-cpp-python has the RPC backend" if HAS_RPC else f"rpc: {NO_RPC}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from rpc_workers import HAS_RPC, NO_RPC

    if not HAS_RPC:  # said again at the end, where it is seen
        terminalreporter.write_line(NO_RPC, red=True, bold=True)


@pytest.fixture
def bare_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine with no model stores: HOME in tmp_path, every store variable unset (tests set
    those they need), specllama's cache there too. Returns HOME."""
    from specllama.models import ollama

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in (
        "OLLAMA_MODELS", "LMSTUDIO_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME",
        "LLAMA_CACHE", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "SPECLLAMA_CATALOG",
    ):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "specllama-cache"))
    monkeypatch.setattr(ollama, "SERVICE_STORE", tmp_path / "no-service-store")
    return home


@pytest.fixture
def stocked_machine(
    bare_machine, tmp_path, smol_q4, smol_f32, smol_draft, smol_2layers, smol_bad_vocab
):
    """`bare_machine` with every store stocked (`store_fakes.stock_machine`): role -> ref."""
    from store_fakes import stock_machine

    models = {
        "q4": smol_q4,
        "f32": smol_f32,
        "draft4": smol_draft,
        "draft2": smol_2layers,
        "bad_vocab": smol_bad_vocab,
    }
    return stock_machine(bare_machine, tmp_path, models)


@pytest.fixture(scope="session")
def qwen35_mtp() -> Path:
    """A tiny hybrid (recurrent + attention) qwen35 target whose MTP head is right 80% of the
    time (`model_factory.qwen35`)."""
    return model_factory.qwen35(0.8)


@pytest.fixture(scope="session")
def qwen35_bad_draft() -> Path:
    """A tiny qwen35 draft model, right 30% of the time: rollback on both sides every round."""
    return model_factory.qwen35_draft(0.3)
