"""llama.cpp's own speculative decoding beside specllama's (`specllama bench --vs-llamacpp`).

Its `llama-speculative-simple` example runs in a process of its own per prompt, on the bench's
prompts rendered through the same chat template (`prompt_text`), with the same models, token
budget, threads, context, GPU layers and sampling settings, greedy by default: with the draft
model (`draft-simple`, or the target's own head, `draft-mtp`, or a head in its own file,
`draft-eagle3` / `draft-dflash`, given as its draft model) at the draft length of specllama's
fixed configuration beside it, and with two of its n-gram drafters at their
defaults (`ngram-simple`, `ngram-mod`).

Its figures are counted as specllama counts them (`read_log`): its decoded count includes the
end-of-generation token it samples, which specllama leaves out, over the same time (both include
the decode that sampled it); its time starts after the prompt's prefill, as specllama's does.
Binaries are found on PATH or in the folder given (a brew or apt install, or a source build's
`build/bin`); a missing or broken one is one line (`LlamaCppUnavailable`), and the bench runs
without it. Running a program is all this module does with llama.cpp: only specllama.llama
touches llama.cpp's Python binding.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specllama.bench.configs import BenchConfig
from specllama.bench.prompts import BenchPrompt
from specllama.bench.runner import ExternalToolError, loaded_head
from specllama.chat import render_chat
from specllama.engine.sampling import SamplingParams
from specllama.errors import SpecllamaError
from specllama.llama.backend import default_threads

if TYPE_CHECKING:
    from specllama.llama.backend import LlamaBackend
    from specllama.session import Engine

BINARY = "llama-speculative-simple"
TOOL = "llama.cpp"
NGRAM_KINDS = ("ngram-simple", "ngram-mod")
# Its --spec-type for each kind of head that comes in its own file (`control.HEADS`).
HEAD_SPEC_TYPES = {"eagle3": "draft-eagle3", "dflash": "draft-dflash", "assistant": "draft-mtp"}
CHECK_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 900.0
# What the bench needs of the binary's options; builds from before them are refused.
NEEDED_OPTIONS = ("--spec-type", "--spec-draft-n-max", "--no-escape")
_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_ENCODED = re.compile(r"encoded\s+(\d+) tokens")
_COUNT = re.compile(r"(n_drafted|n_accept)\s*=\s*(\d+)")
_VERSION = re.compile(r"version:\s*(.+)")


class LlamaCppUnavailable(SpecllamaError):
    """llama.cpp's binary is not there, or does not run here, or is too old for the bench."""


@dataclass(frozen=True)
class LlamaCpp:
    """A `llama-speculative-simple` that runs here, and what it says it is."""

    binary: Path
    version: str

    def as_dict(self) -> dict[str, str]:
        return {"binary": str(self.binary), "version": self.version}


# -- finding and checking the binary ----------------------------------------------------------


def find_binary(where: str | Path | None) -> Path:
    """The binary in `where` (the binary itself, a folder holding it, or a source build with it
    in bin/ or build/bin/), or on PATH when `where` is None or empty."""
    if not where:
        found = shutil.which(BINARY)
        if found is None:
            raise LlamaCppUnavailable(
                f"llama.cpp's {BINARY} is not on PATH",
                hint="install llama.cpp (brew install llama.cpp), or give its folder: "
                "--vs-llamacpp DIR",
            )
        return Path(found)
    folder = Path(where).expanduser()
    for candidate in (
        folder,
        folder / BINARY,
        folder / "bin" / BINARY,
        folder / "build" / "bin" / BINARY,
    ):
        if candidate.is_file() and candidate.name == BINARY:
            return candidate
    raise LlamaCppUnavailable(f"no {BINARY} in {folder} (nor in its bin/ or build/bin/)")


def _environment(binary: Path) -> dict[str, str]:
    """The environment to run it in: a source build keeps its shared libraries beside it."""
    env = dict(os.environ)
    for var in ("LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH"):
        env[var] = os.pathsep.join(p for p in (str(binary.parent), env.get(var, "")) if p)
    return env


def _call(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    binary = Path(command[0])
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        env=_environment(binary),
        check=False,
    )


def check_binary(binary: Path) -> LlamaCpp:
    """Run it once with --help and --version: it must start here and know the options the bench
    passes; else LlamaCppUnavailable, in one line."""
    try:
        helped = _call([str(binary), "--help"], CHECK_TIMEOUT_S)
        versioned = _call([str(binary), "--version"], CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LlamaCppUnavailable(f"{binary} does not run here: {_reason(exc)}") from None
    if helped.returncode != 0:
        raise LlamaCppUnavailable(f"{binary} does not run here: {_failure(helped)}")
    text = helped.stdout + helped.stderr
    missing = [option for option in NEEDED_OPTIONS if option not in text]
    if missing:
        raise LlamaCppUnavailable(
            f"{binary} is too old for the bench: it has no {', '.join(missing)}",
            hint="update llama.cpp",
        )
    found = _VERSION.search(versioned.stdout + versioned.stderr)
    return LlamaCpp(binary, found.group(1).strip() if found else "unknown")


def find(where: str | Path | None) -> LlamaCpp:
    """`--vs-llamacpp [DIR]`: the binary found and checked, or LlamaCppUnavailable."""
    return check_binary(find_binary(where))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"no answer in {exc.timeout:.0f} s"
    return getattr(exc, "strerror", None) or str(exc)


def _failure(done: subprocess.CompletedProcess[str]) -> str:
    """Why a run failed, in a few words: the signal that killed it, or its last line."""
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return f"killed by {name}"
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return f"exit {done.returncode}" + (f": {lines[-1][:200]}" if lines else "")


# -- the prompt, and what its log says ---------------------------------------------------------


def prompt_text(target: LlamaBackend, prompt: BenchPrompt) -> str:
    """The prompt as the target's chat template renders it (as specllama tokenizes it), without
    the BOS: llama.cpp adds it itself where the vocabulary says so."""
    vocab = target.vocab
    bos = target.special_token_text(vocab.bos) if vocab.add_bos else ""
    text = render_chat(
        target.chat_template,
        list(prompt.messages),
        bos_token=bos,
        eos_token=target.special_token_text(vocab.eos),
    )
    return text.removeprefix(bos)


def read_log(log: str, n: int) -> dict[str, Any]:
    """What `llama-speculative-simple -n N` reports, counted as specllama counts. It adds the
    end-of-generation token it samples to its decoded tokens (`n_predict += ids.size()` before
    it looks for one); specllama's count leaves it out, over the same time (both include the
    decode that sampled it). Without one it stops only past N (`n_predict > n_predict_max`), so
    an answer that stopped at N tokens or fewer ended with one: on an 11-token answer that alone
    made llama.cpp's speed read 9% higher.

    Past N it counts N + 1 at most, what its loop asks for. Its n-gram drafters ignore the
    budget in the last round (`common_speculative_draft` truncates a draft only where
    `n_max > 0`, and it passes 0 with one token left), so that round may verify up to 64
    tokens nobody asked for: counted, they made its speed read twice what it took to write N."""
    decoded = _DECODED.search(log)
    if decoded is None:
        raise ExternalToolError("its log has no 'decoded N tokens' line")
    reported, time_s = int(decoded.group(1)), float(decoded.group(2))
    ended = reported <= n
    tokens = reported - 1 if ended else min(reported, n + 1)
    counts = {key: int(value) for key, value in _COUNT.findall(log)}
    drafted, accepted = counts.get("n_drafted", 0), counts.get("n_accept", 0)
    encoded = _ENCODED.search(log)
    return {
        "n_prompt": int(encoded.group(1)) if encoded else None,
        "n_generated": tokens,
        "time_s": time_s,
        "tokens_per_s": tokens / time_s if time_s > 0 else 0.0,
        "n_drafted": drafted,
        "n_accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "finish_reason": "stop" if ended else "length",
    }


# -- its configurations -------------------------------------------------------------------------


@dataclass
class LlamaCppConfig:
    """One kind of llama.cpp's drafting, run on a prompt at a time (`runner.ExternalConfig`)."""

    config: BenchConfig
    tool: LlamaCpp
    args: list[str]  # everything but the prompt and the token budget
    texts: dict[str, str]  # prompt id -> the rendered prompt
    lengths: dict[str, int]  # prompt id -> specllama's prompt tokens, to check it reads the same

    def command(self, prompt_file: str, max_tokens: int) -> list[str]:
        return [str(self.tool.binary), *self.args, "-f", prompt_file, "-n", str(max_tokens)]

    def run(self, prompt: BenchPrompt, max_tokens: int) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="specllama-bench-") as folder:
            path = Path(folder) / "prompt.txt"
            # -f drops one newline at the end of the file: add one, so the prompt stays whole.
            path.write_text(self.texts[prompt.id] + "\n", encoding="utf-8")
            try:
                done = _call(self.command(str(path), max_tokens), RUN_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ExternalToolError(_reason(exc)) from None
        if done.returncode != 0:
            raise ExternalToolError(_failure(done))
        stats = read_log(done.stdout + done.stderr, max_tokens)
        ours = self.lengths[prompt.id]
        if stats["n_prompt"] is not None and stats["n_prompt"] != ours:
            raise ExternalToolError(
                f"it read prompt {prompt.id} as {stats['n_prompt']} tokens, specllama as "
                f"{ours}: not the same prompt"
            )
        return stats


def _common_args(engine: Engine, params: SamplingParams) -> list[str]:
    """The models' settings and the sampling, as specllama runs them."""
    config = engine.config

    def layers(n: int) -> str:
        return "999" if n < 0 else str(n)

    threads = str(config.n_threads or default_threads())
    args = [
        "-m",
        str(config.target),
        "-c",
        str(config.n_ctx),
        "-t",
        threads,
        "-td",
        threads,
        "-ngl",
        layers(config.n_gpu_layers),
        "-ngld",
        layers(config.n_gpu_layers_draft),
        "--temp",
        str(params.temperature),
        "--top-k",
        str(params.top_k),
        "--top-p",
        str(params.top_p),
        "--min-p",
        str(params.min_p),
        "--no-escape",
    ]
    if params.seed is not None:
        args += ["-s", str(params.seed)]
    loaded = [engine.target, engine.draft_model]
    if any(model is not None and model.extra_buffers is False for model in loaded):
        # Where specllama turns them off (for either model), the same kernels crash llama.cpp.
        args.append("--no-repack")
    return args


def configs_for(
    tool: LlamaCpp,
    engine: Engine,
    prompts: list[BenchPrompt],
    params: SamplingParams,
    *,
    draft_max: int,
) -> list[LlamaCppConfig]:
    """llama.cpp's configurations for this engine's models: its draft model (or head: the
    target's own, or the one in its own file) at `draft_max`, and its n-gram drafters."""
    if engine.config.rpc:
        raise LlamaCppUnavailable("--vs-llamacpp does not run with --rpc workers")
    common = _common_args(engine, params)
    texts = {p.id: prompt_text(engine.target, p) for p in prompts}
    lengths = {p.id: len(engine.prompt_tokens(list(p.messages))) for p in prompts}
    kinds: list[tuple[BenchConfig, list[str]]] = []
    length = ["--spec-draft-n-max", str(draft_max)]
    if engine.draft_model is not None:
        config = BenchConfig(f"{TOOL} model:{draft_max}", "model", draft_max, False, tool=TOOL)
        draft = ["-md", str(engine.config.draft), "--spec-type", "draft-simple", *length]
        kinds.append((config, draft))
    elif engine.mtp_head is not None:
        config = BenchConfig(f"{TOOL} mtp:{draft_max}", "mtp", draft_max, False, tool=TOOL)
        kinds.append((config, ["--spec-type", "draft-mtp", *length]))
    elif (head := loaded_head(engine)) in HEAD_SPEC_TYPES:
        config = BenchConfig(f"{TOOL} {head}:{draft_max}", head, draft_max, False, tool=TOOL)
        spec = ["-md", str(engine.config.draft), "--spec-type", HEAD_SPEC_TYPES[head]]
        kinds.append((config, [*spec, *length]))
    for kind in NGRAM_KINDS:
        kinds.append(
            (BenchConfig(f"{TOOL} {kind}", "ngram", None, False, tool=TOOL), ["--spec-type", kind])
        )
    return [LlamaCppConfig(c, tool, [*common, *a], texts, lengths) for c, a in kinds]
