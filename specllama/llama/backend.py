"""One llama.cpp model + context, through llama-cpp-python's low-level API.

Everything above `specllama.llama` sees token ids and numpy arrays. The library itself (loaded
once, what the build can do, RPC devices) is `specllama.llama.library`; the record of what a
context has evaluated, `EvaluatedTokens`, is `specllama.llama.evaluated`; the abort flag that
stops a decode under way, `specllama.llama.abort`; copying a sequence's state out and back in,
`specllama.llama.states`; filling a llama_batch, `specllama.llama.structs`.

`self.tokens` is exactly what the context has evaluated (sequence 0, positions 0..n_past-1).
`decode` appends, `rollback` truncates, `sync` brings the context to any token sequence by
keeping the common prefix and evaluating the rest. Logits are requested only at the batch
positions that need them (no `logits_all` score buffer).
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import psutil

from specllama.errors import ContextOverflowError, ModelLoadError
from specllama.llama import amx, rpc, states
from specllama.llama import exact as exact_mode
from specllama.llama.abort import ABORTED, raise_abort_flag, watch_abort_flag
from specllama.llama.evaluated import DecodeInterrupted, EvaluatedTokens, Part, SavedState
from specllama.llama.gguf_info import read_header
from specllama.llama.library import build_facts, load_llama, rpc_devices
from specllama.llama.structs import fill_batch, has_field
from specllama.llama.vocab import VocabInfo

_GGUF_MAGIC = b"GGUF"
# Snapshots of a recurrent state kept for rollback: a verify batch of a hybrid target may
# drop this many rejected drafts, so drafts for such a target are at most this long.
DEFAULT_ROLLBACK_DEPTH = 16


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


class LlamaBackend(EvaluatedTokens):
    """A loaded model with one context (sequence 0).

    `n_seq`: sequences the context holds (a server's slots; one for a recurrent model), each
    holding at most `n_ctx // n_seq` tokens: in one KV cache shared by all (a quantised model)
    or in a cache of its own (an exact model, --exact, or `unified_kv=False`: its attention then
    reads only its own cells, as it would alone). This object's own bookkeeping is sequence
    0's; `specllama.llama.sequences` keeps the others'.

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
        unified_kv: bool | None = None,
    ) -> None:
        self.path = Path(path)
        _check_gguf(self.path)
        llama_cpp = load_llama()
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
        if load_mtp and has_field(model_params, "load_mtp"):
            model_params.load_mtp = True
        if self.workers:
            self._watchdog = rpc.Watchdog(
                rpc_timeout_s, lambda: rpc.fatal(rpc.timeout_error(self.workers, rpc_timeout_s))
            )
            with self._watchdog.armed():
                handles = rpc_devices(self.workers)
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
        self._eog: dict[int, bool] = {}  # is_eog, token_bytes: cached per token
        self._pieces: dict[tuple[int, bool], bytes] = {}

        threads = n_threads or default_threads()
        self.n_threads = threads
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = n_ctx
        ctx_params.n_batch = n_batch
        ctx_params.n_ubatch = n_batch
        ctx_params.n_threads = threads
        ctx_params.n_threads_batch = threads
        ctx_params.n_seq_max = n_seq
        # A model stored all in F32 is there for exact arithmetic: its KV cache stays F32 too,
        # without flash attention (which takes K and V in F16). Batched and one-token decodes
        # then agree to ~2e-5 in the logits instead of ~1e-2 (SmolLM2-135M, measured), so a
        # greedy or seeded sampled speculative run writes the target alone's tokens.
        n_params = llama_cpp.llama_model_n_params(self._model)
        self.exact = llama_cpp.llama_model_size(self._model) == 4 * n_params  # 4 bytes each
        if self.exact:
            ctx_params.type_k = ctx_params.type_v = llama_cpp.GGML_TYPE_F32
            ctx_params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        # The sequences (a server's slots) share one KV cache, as llama-server's slots do: a
        # step of four slots' tokens then takes 141 ms against 171 ms with a cache per
        # sequence (Qwen2.5-Coder-1.5B Q4_K_M, 2-core EPYC; research/RESULTS.md, issue 53).
        # Each sequence still holds at most its share (`n_ctx`). An exact model or --exact
        # keeps a cache per sequence: a sequence's attention then reads its own cells in the
        # order it would alone, so its answer among others is its answer alone.
        if unified_kv is None:
            unified_kv = not (self.exact or batch_invariant)
        ctx_params.kv_unified = unified_kv
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
        snapshots = self.recurrent and has_field(ctx_params, "n_rs_seq")
        if snapshots:
            ctx_params.n_rs_seq = rollback_depth
        with self._waiting():
            self._ctx = llama_cpp.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise ModelLoadError(f"llama.cpp could not create a context for {self.path}")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._abort_flag = watch_abort_flag(llama_cpp, self._ctx)
        self.aborted = False
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
        # llama_decode calls, and the sequences they carried together (a server's slots share
        # one call per step): their ratio is how full the batches were.
        self.n_decodes = 0
        self.n_decode_sequences = 0

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

    def abort_decodes(self) -> None:
        """From any thread: the decode under way stops at its next graph node (on the CPU;
        elsewhere at its next chunk) and every later one at once, with DecodeInterrupted. For
        a server that is stopping: a chunk of a long prompt can take seconds."""
        self.aborted = True
        if self._abort_flag is not None:
            raise_abort_flag(self._abort_flag)

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
        # Cached, as token_bytes: a call into llama.cpp lets go of the GIL, and beside other
        # slots' threads getting it back can cost more than the call.
        known = self._eog.get(token)
        if known is None:
            known = self._eog[token] = bool(self._lib.llama_vocab_is_eog(self._vocab, token))
        return known

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
        known = self._pieces.get((token, special))
        if known is None:
            known = self._pieces[token, special] = self._token_bytes(token, special)
        return known

    def _token_bytes(self, token: int, special: bool) -> bytes:
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
                if start:
                    self.stop_if_interrupted()
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
        if self.aborted:
            raise DecodeInterrupted("the server is stopping")
        batch = self._batch
        fill_batch(batch, chunk, self.n_past, set(logits_at))
        status = self._lib.llama_decode(self._ctx, batch)
        if status == ABORTED:  # llama.cpp dropped this chunk: what came before stays
            raise DecodeInterrupted(f"aborted after {self.n_past} tokens")
        if status != 0:
            raise ContextOverflowError(
                f"llama.cpp failed to evaluate {len(chunk)} tokens (status {status})",
                hint="the context may be full: try a larger --ctx",
            )
        self.n_decodes += 1
        self.n_decode_sequences += 1
        if self.on_decoded is not None:
            self.on_decoded(self.n_past, len(chunk))
        self.tokens.extend(chunk)

    def decode_parts(self, parts: Sequence[Part]) -> list[np.ndarray]:
        """Evaluate several sequences' tokens in ONE llama_decode (together at most n_batch);
        return each part's logits rows (copies), in order. The caller keeps each sequence's
        bookkeeping (`specllama.llama.sequences`); this context's own, sequence 0's, is not
        touched."""
        if self.aborted:
            raise DecodeInterrupted("the server is stopping")
        # In sequence order: with a KV cache per sequence (an exact model, --exact), a step of
        # four slots' tokens given out of order took 170-210 ms against 128-139 ms in order
        # (Qwen2.5-Coder-1.5B Q4_K_M, 2-core EPYC; research/RESULTS.md, issue 53).
        order = sorted(range(len(parts)), key=lambda i: parts[i].seq)
        offset = self._fill_parts([parts[i] for i in order])
        started = time.perf_counter()
        with self._waiting():
            status = self._lib.llama_decode(self._ctx, self._batch)
            if status == ABORTED:
                raise DecodeInterrupted("the batch was aborted")
            if status != 0:
                raise ContextOverflowError(
                    f"llama.cpp failed to evaluate a batch of {offset} tokens (status {status})",
                    hint="the context may be full: try a larger --ctx",
                )
            rows = self._logits_view(sum(len(part.logits_at) for part in parts))
            out: list[np.ndarray] = [np.empty(0)] * len(parts)
            first = 0
            for i in order:  # flagged rows come back in batch order
                n = len(parts[i].logits_at)
                out[i] = np.array(rows[first : first + n])
                first += n
        self.n_decoded += offset
        self.n_decodes += 1
        self.n_decode_sequences += len({part.seq for part in parts})
        self.decode_seconds += time.perf_counter() - started
        return out

    def _fill_parts(self, parts: Sequence[Part]) -> int:
        """Put the parts in the batch, in the order given; the tokens they hold."""
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
        return offset

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

    def state_size(self) -> int:
        """The bytes `save_state` would copy (measured without copying)."""
        return self.sequence_state_size(0)

    def sequence_state_size(self, seq: int) -> int:
        return states.sequence_state_size(self._lib, self._ctx, seq)

    def save_sequence(self, seq: int, tokens: Sequence[int]) -> SavedState:
        """Sequence `seq`'s KV cache copied out, with the tokens it holds."""
        return states.save_sequence(self._lib, self._ctx, seq, tokens)

    def load_sequence(self, seq: int, saved: SavedState) -> bool:
        """Make sequence `seq` hold `saved` (False, and the sequence empty, if llama.cpp
        refuses it). Any sequence's saved state loads into any other."""
        return states.load_sequence(self._lib, self._ctx, self._memory, seq, saved)

    # -- recurrent state checkpoints --------------------------------------------------------

    def checkpoint(self) -> None:
        """Remember the recurrent state here, so that a later rollback to this point or after
        it re-evaluates only the tokens since (no-op for a model without recurrent layers)."""
        if not self.recurrent:
            return
        reuse = self._checkpoint[1] if self._checkpoint else None  # a draft's, every round
        state, written = states.save_recurrent(self._lib, self._ctx, reuse)
        self._checkpoint = (self.n_past, state, written)

    def _restore_checkpoint(self, n_past: int) -> int:
        """Bring the context back to the checkpoint if it is at or before `n_past` (else to
        the start); return the position it is back at."""
        lib = self._lib
        if self._checkpoint is not None and self._checkpoint[0] <= n_past:
            at, state, size = self._checkpoint
            if states.load_recurrent(lib, self._ctx, state, size):
                lib.llama_memory_seq_rm(self._memory, 0, at, -1)  # the KV part
                return at
        self._checkpoint = None
        lib.llama_memory_seq_rm(self._memory, 0, 0, -1)  # the whole sequence always goes
        return 0
