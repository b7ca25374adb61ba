"""One llama.cpp model + context, through llama-cpp-python's low-level API.

The only module that imports `llama_cpp`. Everything above it sees token ids and numpy arrays.

Bookkeeping lives here, in one place: `self.tokens` is exactly what the context has evaluated
(sequence 0, positions 0..n_past-1). `decode` appends, `rollback` truncates, `sync` brings the
context to any token sequence by keeping the common prefix and evaluating the rest. Logits are
requested only at the batch positions that need them (no `logits_all` score buffer).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import psutil

from specllama.errors import ContextOverflowError, ModelLoadError, RpcError
from specllama.llama import amx, ggml_rpc, rpc
from specllama.llama import exact as exact_mode
from specllama.llama.gguf_info import read_header
from specllama.llama.vocab import VocabInfo

log = logging.getLogger("specllama.llama_cpp")

_GGUF_MAGIC = b"GGUF"
_LOG_LEVELS = {1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR, 4: logging.DEBUG}
# llama.cpp's and ggml's last log lines: what an abort message alone does not say (the RPC
# client logs "RPC server version mismatch: 6.0.0", then aborts with "handshake failed").
_recent_log: deque[str] = deque(maxlen=8)


@cache
def _llama():
    """Import llama_cpp once, and route its log lines to Python logging (debug level)."""
    import llama_cpp

    @llama_cpp.llama_log_callback
    def to_logging(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
        _recent_log.append(text.decode("utf-8", "replace").strip())
        if log.isEnabledFor(logging.DEBUG):
            log.debug(_recent_log[-1])

    llama_cpp.llama_log_set(to_logging, ctypes.c_void_p(0))
    _llama.callback = to_logging  # keep the ctypes callback alive
    llama_cpp.llama_backend_init()
    return llama_cpp


@dataclass(frozen=True)
class BuildFacts:
    """What this llama.cpp build can do."""

    version: str
    gpu_offload: bool  # a local GPU: RPC workers do not count
    system_info: str
    library: str = ""  # the libllama file loaded (a rebuild changes its size and time)
    rpc: bool = False  # built with ggml's RPC backend (-DGGML_RPC=ON): --rpc and `worker`

    @property
    def build_id(self) -> dict[str, object]:
        """What tells this build from another, for caches of what was learnt about it."""
        try:
            st = os.stat(self.library)
            file_id: list[object] = [self.library, st.st_size, st.st_mtime_ns]
        except OSError:
            file_id = [self.library]
        return {"version": self.version, "system_info": self.system_info, "library": file_id}


@cache
def build_facts() -> BuildFacts:
    llama_cpp = _llama()
    has_rpc = bool(llama_cpp.llama_supports_rpc())
    # llama_supports_gpu_offload() says yes for any build with RPC (workers count as GPUs):
    # with RPC, ask ggml for a local GPU instead.
    gpu_offload = bool(llama_cpp.llama_supports_gpu_offload())
    if gpu_offload and has_rpc:
        gpu_offload = bool(_local_gpus())
    return BuildFacts(
        version=llama_cpp.__version__,
        gpu_offload=gpu_offload,
        system_info=llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
        library=str(getattr(llama_cpp.llama_cpp._lib, "_name", "")),
        rpc=has_rpc,
    )


# -- ggml: devices, RPC workers, and the abort that an RPC failure ends in ---------------------


@cache
def _ggml() -> ggml_rpc.Ggml:
    """ggml's own functions, from the libraries llama_cpp loaded."""
    return ggml_rpc.Ggml(Path(_llama().llama_cpp._lib._name).parent)


def _local_gpus() -> list[ggml_rpc.Device]:
    kinds = (ggml_rpc.DEVICE_GPU, ggml_rpc.DEVICE_IGPU)
    return [d for d in _ggml().local_devices() if d.kind in kinds]


_rpc_endpoints: list[str] = []  # the workers this process uses, named when one is lost


@ggml_rpc.ABORT_CALLBACK
def _on_abort(message: bytes) -> None:
    """ggml is about to abort(): an RPC failure becomes one line and exit 1; anything else
    (a bug) is printed and aborts as before."""
    text = (message or b"").decode("utf-8", "replace").strip()
    if "ggml-rpc" not in text or os.environ.get("SPECLLAMA_DEBUG") == "1":
        sys.stderr.write(text + "\n")
        return
    rpc.fatal(rpc.describe_abort(text, list(_recent_log), _rpc_endpoints, build_facts().version))


def _check_rpc() -> None:
    if not build_facts().rpc:
        raise RpcError(
            "this llama-cpp-python was built without RPC",
            hint="`specllama doctor` shows the reinstall that adds it",
        )


def _rpc_devices(endpoints: Sequence[str]) -> list[int]:
    """The target's devices with --rpc: every worker's, then this machine's GPUs (llama.cpp's
    order: the workers first, to keep the transfers down); the CPU takes what is left."""
    _check_rpc()
    if not _rpc_endpoints:
        _ggml().set_abort_callback(_on_abort)
    _rpc_endpoints.extend(e for e in endpoints if e not in _rpc_endpoints)
    remote = [handle for endpoint in endpoints for handle in _ggml().add_server(endpoint)]
    return remote + [d.handle for d in _local_gpus()]


def worker_devices(gpu: bool | None) -> list[ggml_rpc.Device]:
    """What `specllama worker` serves: this machine's GPUs (gpu None: when it has any), or its
    CPU (gpu False, or None without a GPU)."""
    _check_rpc()
    gpus = _local_gpus() if gpu is not False else []
    if gpu and not gpus:
        raise RpcError("this machine has no GPU this llama.cpp build can use", hint="--cpu")
    if gpus:
        return gpus
    return [d for d in _ggml().local_devices() if d.kind == ggml_rpc.DEVICE_CPU][:1]


def serve_rpc(endpoint: str, devices: Sequence[ggml_rpc.Device], threads: int) -> None:
    """ggml's RPC server on `endpoint` (IPv4:port); returns only if it cannot listen."""
    _ggml().start_server(endpoint, list(devices), threads)


# Snapshots of a recurrent state kept for rollback: a verify batch of a hybrid target may
# drop this many rejected drafts, so drafts for such a target are at most this long.
DEFAULT_ROLLBACK_DEPTH = 16


def _has_field(struct: ctypes.Structure, name: str) -> bool:
    """Whether this llama-cpp-python's ctypes structure has `name` (fields come and go)."""
    return any(field[0] == name for field in type(struct)._fields_)


def fill_batch(
    batch,
    tokens: Sequence[int],
    first_pos: int,
    logits_at: Container[int],
    *,
    seq: int = 0,
    offset: int = 0,
) -> None:
    """Put `tokens` in a llama_batch from index `offset` on, at positions from `first_pos` of
    sequence `seq`, with logits wanted at the indices in `logits_at` (indices into `tokens`)."""
    for i, token in enumerate(tokens):
        at = offset + i
        batch.token[at] = token
        batch.pos[at] = first_pos + i
        batch.n_seq_id[at] = 1
        batch.seq_id[at][0] = seq
        batch.logits[at] = i in logits_at
    batch.n_tokens = offset + len(tokens)


@dataclass(frozen=True)
class Part:
    """One sequence's share of a batch shared by several (`LlamaBackend.decode_parts`)."""

    seq: int
    first_pos: int
    tokens: Sequence[int]
    logits_at: Sequence[int]  # sorted indices into `tokens`


def default_threads() -> int:
    """Physical cores: llama-cpp-python's default (half the logical CPUs) halves speed on
    small machines. Draft and target run in turn, so both may use all of them."""
    return psutil.cpu_count(logical=False) or psutil.cpu_count() or 1


def _check_gguf(path: Path) -> None:
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {path}")
    with open(path, "rb") as f:
        if f.read(4) != _GGUF_MAGIC:
            raise ModelLoadError(
                f"{path} is not a GGUF file", hint="specllama runs llama.cpp models (.gguf)"
            )


@dataclass(frozen=True)
class SavedState:
    """A context's evaluated tokens and its KV cache's bytes (llama.cpp's sequence state)."""

    tokens: tuple[int, ...]
    data: ctypes.Array
    size: int  # bytes of `data` written


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    for mine, theirs in zip(a, b):
        if mine != theirs:
            break
        n += 1
    return n


class EvaluatedTokens:
    """The record of what a context has evaluated, and how to bring it to any sequence.

    A subclass provides `decode(tokens, logits_at)`, which appends to `self.tokens`, and
    `_forget(n_past)`, which drops its cache after the first n_past tokens. (The tests' fake
    backend shares this bookkeeping with the real one.)
    """

    tokens: list[int]
    # How many tokens a rollback may drop right after a decode (None: any number).
    max_rollback: int | None = None
    # Time its decodes spent on other sequences' tokens, in a step shared with them (a
    # server's slots): part of a round's wall time, but not what the round cost.
    waited_seconds: float = 0.0

    def decode(
        self, tokens: Sequence[int], logits_at: Sequence[int] = (), *, copy: bool = True
    ) -> np.ndarray:
        raise NotImplementedError

    def _forget(self, n_past: int) -> None:
        raise NotImplementedError

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def rollback(self, n_past: int) -> None:
        """Forget everything after the first `n_past` tokens."""
        if n_past < self.n_past:
            self._forget(n_past)
            del self.tokens[n_past:]

    def common_prefix(self, tokens: Sequence[int]) -> int:
        evaluated = self.tokens
        if len(evaluated) <= len(tokens) and list(tokens[: len(evaluated)]) == evaluated:
            return len(evaluated)  # the usual case, compared at C speed
        return common_prefix_length(evaluated, tokens)

    def sync(self, tokens: Sequence[int], logits_at_last: bool = False) -> np.ndarray | None:
        """Make the context hold exactly `tokens`, reusing the common prefix.

        With `logits_at_last`, returns the logits after the last token (re-evaluating it if it
        was already in the cache, since llama.cpp keeps no logits for old positions), as a view
        valid until the next decode.
        """
        keep = self.common_prefix(tokens)
        if logits_at_last and keep == len(tokens):
            keep -= 1
        self.rollback(keep)
        rest = list(tokens[keep:])
        if not logits_at_last:
            self.decode(rest)
            self.checkpoint()
            return None
        logits = self.decode(rest, [len(rest) - 1], copy=False)[0]
        self.checkpoint()
        return logits

    def checkpoint(self) -> None:
        """Remember the state here, where a rollback cannot reach back on its own (recurrent
        models); a no-op for a KV cache."""


class LlamaBackend(EvaluatedTokens):
    """A loaded model with one context (sequence 0).

    `n_seq`: sequences the context holds (a server's slots; one for a recurrent model), each
    with `n_ctx // n_seq` tokens of its own KV cache (llama.cpp's streams, not one shared
    buffer: a sequence's attention then spans only its own cells, as it would alone). This
    object's own bookkeeping is sequence 0's; `specllama.llama.sequences` keeps the others'.

    `extra_buffers`: llama.cpp's extra buffer types (CPU weight repacking, AMX kernels). None
    decides it the safe way for this machine (`specllama.llama.amx`: off only where the AMX kernels
    crash); True or False forces it.

    `workers`: RPC workers (HOST:PORT) that take the offloaded layers (`n_gpu_layers`), with
    this machine's GPUs. Loading and every decode then run under a watchdog of `rpc_timeout_s`.

    `load_mtp`: also load the model's own draft head (MTP / nextn layers), for an `MtpHead`.

    `batch_invariant`: exact mode (`specllama.llama.exact`): no extra buffers and no tiled
    matmul, so a token verified in a batch gets the logits it gets alone, on the CPU; the whole
    process must choose it before its first model loads. `exact_problems` then says, one line
    each, why it cannot hold for this file here (empty: it holds). Not to be confused with
    `exact`, which says the file is all F32 (its KV cache then stays F32 too).

    Recurrent and hybrid models (Mamba, qwen35's gated delta net): a recurrent state cannot be
    cut back like a KV cache. llama.cpp keeps `rollback_depth` per-token snapshots of the last
    batch (`n_rs_seq`), so a verify batch can drop up to that many rejected drafts; anything
    further back (a draft model's token-by-token drafts, an edited chat) restores the last
    checkpoint (`checkpoint()`) or starts over, and re-evaluates what is kept.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 4096,
        n_gpu_layers: int = 0,
        n_threads: int | None = None,
        n_batch: int = 512,
        extra_buffers: bool | None = None,
        workers: Sequence[str] = (),
        rpc_timeout_s: float = rpc.DEFAULT_TIMEOUT_S,
        load_mtp: bool = False,
        rollback_depth: int = DEFAULT_ROLLBACK_DEPTH,
        n_seq: int = 1,
        batch_invariant: bool = False,
    ) -> None:
        self.path = Path(path)
        _check_gguf(self.path)
        llama_cpp = _llama()
        self._lib = llama_cpp
        self.batch_invariant = batch_invariant
        if batch_invariant:  # before any load: ggml reads the tiled switch once per process
            exact_mode.use_batch_invariant_kernels()
            extra_buffers = False  # repacked weights: gemm for 4+ rows, gemv below
        exact_mode.note_model_load()
        if extra_buffers is None:
            facts = build_facts()
            extra_buffers = amx.extra_buffers_for(
                self.path, system_info=facts.system_info, build_id=facts.build_id
            ).extra_buffers
        self.extra_buffers = extra_buffers
        self.workers = tuple(workers)
        self._watchdog: rpc.Watchdog | None = None

        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = n_gpu_layers
        model_params.use_extra_bufts = extra_buffers
        if load_mtp and _has_field(model_params, "load_mtp"):
            model_params.load_mtp = True
        if self.workers:
            self._watchdog = rpc.Watchdog(
                rpc_timeout_s, lambda: rpc.fatal(rpc.timeout_error(self.workers, rpc_timeout_s))
            )
            with self._watchdog.armed():
                handles = _rpc_devices(self.workers)
            # NULL-terminated; kept alive with the model. Loading feeds the watchdog as weights
            # reach the workers, so a slow network is not a hung one.
            self._devices = (ctypes.c_void_p * (len(handles) + 1))(*handles, None)
            model_params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
            self._progress = llama_cpp.llama_progress_callback(self._loading)
            model_params.progress_callback = self._progress
        with self._waiting():
            self._model = llama_cpp.llama_model_load_from_file(
                str(self.path).encode(), model_params
            )
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not load {self.path}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)

        threads = n_threads or default_threads()
        self.n_threads = threads
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = n_ctx
        ctx_params.n_batch = n_batch
        ctx_params.n_ubatch = n_batch
        ctx_params.n_threads = threads
        ctx_params.n_threads_batch = threads
        ctx_params.n_seq_max = n_seq
        ctx_params.kv_unified = False
        # A model stored all in F32 is there for exact arithmetic: its KV cache stays F32 too,
        # without flash attention (which takes K and V in F16). Batched and one-token decodes
        # then agree to ~2e-5 in the logits instead of ~1e-2 (SmolLM2-135M, measured), so a
        # greedy or seeded sampled speculative run writes the target alone's tokens.
        n_params = llama_cpp.llama_model_n_params(self._model)
        self.exact = llama_cpp.llama_model_size(self._model) == 4 * n_params  # 4 bytes each
        if self.exact:
            ctx_params.type_k = ctx_params.type_v = llama_cpp.GGML_TYPE_F32
            ctx_params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.exact_problems = (
            self._exact_problems(n_gpu_layers, bool(self.workers)) if batch_invariant else []
        )
        self.recurrent = bool(
            llama_cpp.llama_model_is_recurrent(self._model)
            or llama_cpp.llama_model_is_hybrid(self._model)
        )
        if self.recurrent and n_seq > 1:  # its state cannot be cut back per sequence: one
            n_ctx, n_seq = n_ctx // n_seq, 1
            ctx_params.n_ctx, ctx_params.n_seq_max = n_ctx, 1
        snapshots = self.recurrent and _has_field(ctx_params, "n_rs_seq")
        if snapshots:
            ctx_params.n_rs_seq = rollback_depth
        with self._waiting():
            self._ctx = llama_cpp.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise ModelLoadError(f"llama.cpp could not create a context for {self.path}")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        # llama.cpp pads the context up (to 256); the limit the user asked for is the one we keep.
        self.n_ctx = min(n_ctx // n_seq, llama_cpp.llama_n_ctx_seq(self._ctx))
        self.n_seq = n_seq
        # llama.cpp may round n_ctx up and clamp the batch to it: use what it chose.
        self.n_batch = min(llama_cpp.llama_n_batch(self._ctx), llama_cpp.llama_n_ubatch(self._ctx))
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        # How many rejected drafts a verify batch may drop: unbounded for a KV cache, the
        # snapshots kept for a recurrent state (0 where this llama.cpp keeps none).
        self.max_rollback: int | None = None
        if self.recurrent:
            self.max_rollback = int(llama_cpp.llama_n_rs_seq(self._ctx)) if snapshots else 0
        # (n_past, the recurrent state there, its size in bytes)
        self._checkpoint: tuple[int, ctypes.Array, int] | None = None
        # Called after each decoded chunk with (first position, n tokens): the MTP head reads
        # the target's hidden rows there, before the next decode overwrites them.
        self.on_decoded: Callable[[int, int], None] | None = None
        self.tokens: list[int] = []
        self.n_decoded = 0  # tokens evaluated over the lifetime (prefix reuse shows up here)
        self.decode_seconds = 0.0  # time evaluating, logits included: what is not Python overhead

    def _exact_problems(self, n_gpu_layers: int, rpc_workers: bool) -> list[str]:
        """Why exact mode cannot hold for this file here, one line each (research/RESULTS.md)."""
        offloaded_to = None
        if rpc_workers:
            offloaded_to = "the RPC workers"
        elif n_gpu_layers != 0 and build_facts().gpu_offload:
            offloaded_to = "the GPU"
        return exact_mode.problems(
            self.path.name,
            file_type=read_header(self.path).file_type,
            all_f32=self.exact,
            system_info=build_facts().system_info,
            offloaded_to=offloaded_to,
        )

    def _loading(self, _progress: float, _user_data: ctypes.c_void_p) -> bool:
        if self._watchdog is not None:
            self._watchdog.feed()
        return True

    def _waiting(self) -> contextlib.AbstractContextManager[None]:
        """Around every call that may wait for a worker: the watchdog, with --rpc."""
        return self._watchdog.armed() if self._watchdog else contextlib.nullcontext()

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            with self._waiting():  # with --rpc, freeing tells the workers
                self._lib.llama_batch_free(self._batch)
                self._lib.llama_free(self._ctx)
                self._lib.llama_model_free(self._model)
            self._ctx = None

    def __enter__(self) -> LlamaBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # -- vocabulary -------------------------------------------------------------------------

    @property
    def vocab(self) -> VocabInfo:
        lib, v = self._lib, self._vocab
        return VocabInfo(
            vocab_type=lib.llama_vocab_type(v),
            n_vocab=self.n_vocab,
            bos=lib.llama_vocab_bos(v),
            eos=lib.llama_vocab_eos(v),
            add_bos=bool(lib.llama_vocab_get_add_bos(v)),
        )

    def token_text(self, token: int) -> bytes:
        """The raw vocabulary entry (as stored in the GGUF), for the compatibility check."""
        return self._lib.llama_vocab_get_text(self._vocab, token) or b""

    def is_eog(self, token: int) -> bool:
        return bool(self._lib.llama_vocab_is_eog(self._vocab, token))

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """Text -> ids. `special` parses control tokens written in the text (chat templates)."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (self._lib.llama_token * capacity)()
        n = self._lib.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_bos, special)
        if n < 0:  # buffer too small: llama.cpp says how many it needs
            capacity = -n
            buf = (self._lib.llama_token * capacity)()
            n = self._lib.llama_tokenize(
                self._vocab, data, len(data), buf, capacity, add_bos, special
            )
        return list(buf[:n])

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """One token's bytes (may be part of a UTF-8 character); control tokens render empty."""
        buf = ctypes.create_string_buffer(64)
        n = self._lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    def metadata(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = self._lib.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):  # long values (chat templates) need a bigger buffer
            buf = ctypes.create_string_buffer(n + 1)
            self._lib.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    @property
    def chat_template(self) -> str | None:
        return self.metadata("tokenizer.chat_template")

    def special_token_text(self, token: int) -> str:
        return self.token_bytes(token, special=True).decode("utf-8", "replace")

    # -- evaluation -------------------------------------------------------------------------

    def check_fits(self, n_tokens: int) -> None:
        if n_tokens > self.n_ctx:
            raise ContextOverflowError(
                f"{n_tokens} tokens do not fit in the context of {self.n_ctx} tokens",
                hint="use a shorter prompt or a larger --ctx",
            )

    def decode(
        self, tokens: Sequence[int], logits_at: Sequence[int] = (), *, copy: bool = True
    ) -> np.ndarray:
        """Evaluate `tokens` after what is already in the context.

        Returns one logits row per index in `logits_at` (indices into `tokens`), as a
        float32 array of shape (len(logits_at), n_vocab). Batches longer than n_batch are
        split into chunks; the rows of each chunk are copied out, in one copy, right after it
        runs (llama.cpp keeps the flagged rows contiguous, in batch order). With `copy=False`, a
        batch of one chunk returns a read-only view of llama.cpp's buffer instead, valid until
        the next decode: the loop reads each row once, and a copy costs ~55 us per row of a
        151,936-token vocabulary.
        """
        self.check_fits(self.n_past + len(tokens))
        # Timed up to reading the logits: on a GPU llama_decode returns before the work is
        # done, and llama_get_logits is where it waits.
        started = time.perf_counter()
        wanted = sorted(set(logits_at))
        if not copy and len(tokens) <= self.n_batch:
            with self._waiting():
                self._decode_chunk(tokens, wanted)
                out = self._logits_view(len(wanted))
        else:
            out = np.empty((len(wanted), self.n_vocab), dtype=np.float32)
            filled = 0
            for start in range(0, len(tokens), self.n_batch):
                chunk = tokens[start : start + self.n_batch]
                in_chunk = [i - start for i in wanted if start <= i < start + len(chunk)]
                with self._waiting():
                    self._decode_chunk(chunk, in_chunk)
                    if in_chunk:
                        out[filled : filled + len(in_chunk)] = self._logits_view(len(in_chunk))
                filled += len(in_chunk)
        self.n_decoded += len(tokens)
        self.decode_seconds += time.perf_counter() - started
        if list(logits_at) == wanted:
            return out
        row_of = {position: row for row, position in enumerate(wanted)}
        return out[[row_of[i] for i in logits_at]]

    def _logits_view(self, n_rows: int) -> np.ndarray:
        if not n_rows:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        pointer = self._lib.llama_get_logits(self._ctx)
        rows = np.ctypeslib.as_array(pointer, shape=(n_rows, self.n_vocab))
        rows.flags.writeable = False
        return rows

    def _decode_chunk(self, chunk: Sequence[int], logits_at: Sequence[int]) -> None:
        batch = self._batch
        fill_batch(batch, chunk, self.n_past, set(logits_at))
        status = self._lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise ContextOverflowError(
                f"llama.cpp failed to evaluate {len(chunk)} tokens (status {status})",
                hint="the context may be full: try a larger --ctx",
            )
        if self.on_decoded is not None:
            self.on_decoded(self.n_past, len(chunk))
        self.tokens.extend(chunk)

    def decode_parts(self, parts: Sequence[Part]) -> list[np.ndarray]:
        """Evaluate several sequences' tokens in ONE llama_decode (together at most n_batch);
        return each part's logits rows (copies), in order. The caller keeps each sequence's
        bookkeeping (`specllama.llama.sequences`); this context's own, sequence 0's, is not
        touched."""
        offset = 0
        for part in parts:
            fill_batch(
                self._batch,
                part.tokens,
                part.first_pos,
                part.logits_at,
                seq=part.seq,
                offset=offset,
            )
            offset += len(part.tokens)
        started = time.perf_counter()
        with self._waiting():
            status = self._lib.llama_decode(self._ctx, self._batch)
            if status != 0:
                raise ContextOverflowError(
                    f"llama.cpp failed to evaluate a batch of {offset} tokens (status {status})",
                    hint="the context may be full: try a larger --ctx",
                )
            rows = self._logits_view(sum(len(part.logits_at) for part in parts))
            out, first = [], 0
            for part in parts:  # flagged rows come back in batch order
                out.append(np.array(rows[first : first + len(part.logits_at)]))
                first += len(part.logits_at)
        self.n_decoded += offset
        self.decode_seconds += time.perf_counter() - started
        return out

    def forget(self, seq: int, n_past: int) -> None:
        """Drop sequence `seq`'s cache from position `n_past` on (a KV cache only)."""
        self._lib.llama_memory_seq_rm(self._memory, seq, n_past, -1)

    def _forget(self, n_past: int) -> None:
        if self._checkpoint is not None and self._checkpoint[0] > n_past:
            self._checkpoint = None  # it holds tokens that are going
        if self._lib.llama_memory_seq_rm(self._memory, 0, n_past, -1):
            return
        # A recurrent state past its snapshots: go back to the checkpoint (or the start) and
        # evaluate again what is kept.
        kept = self.tokens[:n_past]
        start = self._restore_checkpoint(n_past)
        del self.tokens[start:]
        self.decode(kept[start:])

    # -- saved states (a prompt cache) -----------------------------------------------------

    def save_state(self) -> SavedState:
        """What this context has evaluated, its KV cache copied out (sequence 0): a prompt
        cache keeps it, to bring this context back to it later without evaluating again."""
        return self.save_sequence(0, self.tokens)

    def load_state(self, saved: SavedState) -> bool:
        """Make the context hold what `saved` holds (False, and an empty context, if llama.cpp
        refuses it)."""
        self._checkpoint = None
        self.tokens = []
        if not self.load_sequence(0, saved):
            return False
        self.tokens = list(saved.tokens)
        return True

    def save_sequence(self, seq: int, tokens: Sequence[int]) -> SavedState:
        """Sequence `seq`'s KV cache copied out, with the tokens it holds."""
        lib = self._lib
        size = lib.llama_state_seq_get_size(self._ctx, seq)
        data = (ctypes.c_uint8 * size)()  # kept as is: no copy into Python objects
        written = lib.llama_state_seq_get_data(self._ctx, data, size, seq)
        return SavedState(tuple(tokens), data, written)

    def load_sequence(self, seq: int, saved: SavedState) -> bool:
        """Make sequence `seq` hold `saved` (False, and the sequence empty, if llama.cpp
        refuses it). Any sequence's saved state loads into any other."""
        lib = self._lib
        lib.llama_memory_seq_rm(self._memory, seq, 0, -1)
        if saved.size == 0:
            return False
        return bool(lib.llama_state_seq_set_data(self._ctx, saved.data, saved.size, seq))

    # -- recurrent state checkpoints --------------------------------------------------------

    def checkpoint(self) -> None:
        """Remember the recurrent state here, so that a later rollback to this point or after
        it re-evaluates only the tokens since (no-op for a model without recurrent layers)."""
        if not self.recurrent:
            return
        lib, flags = self._lib, self._lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = lib.llama_state_seq_get_size_ext(self._ctx, 0, flags)
        state = self._checkpoint[1] if self._checkpoint else None  # a draft's, every round
        if state is None or len(state) < size:
            state = (ctypes.c_uint8 * size)()  # kept as is: no copy into Python objects
        written = lib.llama_state_seq_get_data_ext(self._ctx, state, size, 0, flags)
        self._checkpoint = (self.n_past, state, written)

    def _restore_checkpoint(self, n_past: int) -> int:
        """Bring the context back to the checkpoint if it is at or before `n_past` (else to
        the start); return the position it is back at."""
        lib = self._lib
        if self._checkpoint is not None and self._checkpoint[0] <= n_past:
            at, state, size = self._checkpoint
            flags = lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
            if lib.llama_state_seq_set_data_ext(self._ctx, state, size, 0, flags):
                lib.llama_memory_seq_rm(self._memory, 0, at, -1)  # the KV part
                return at
        self._checkpoint = None
        lib.llama_memory_seq_rm(self._memory, 0, 0, -1)  # the whole sequence always goes
        return 0
