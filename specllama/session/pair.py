"""Load a draft/target pair once, then generate from prompts or conversations.

What the commands (run, chat, bench) and the server share: loading both models, the vocabulary
check, building the drafter, the memory of what was written, running the loop, and the measured
costs and controller that choose its drafts. Its prompts and thinking are `prompts`' part.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

from specllama import memory_store
from specllama.engine.constraint import ConstraintSpec, Grammar, compile_constraint
from specllama.engine.control import MODEL, DraftController, FixedLength
from specllama.engine.cross_drafter import CrossTokenizerDrafter
from specllama.engine.drafters import (
    CombinedDrafter,
    Drafter,
    DraftModelDrafter,
    NgramDrafter,
    NoDrafter,
)
from specllama.engine.events import Event, FinishEvent, TokenEvent
from specllama.engine.memory import TokenMemory
from specllama.engine.mtp import MtpDrafter
from specllama.engine.prediction import Prediction
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.errors import UsageError
from specllama.llama import rpc
from specllama.llama.backend import LlamaBackend, default_threads
from specllama.llama.dflash import DFlashHead
from specllama.llama.eagle3 import Eagle3Head
from specllama.llama.evaluated import EvaluatedTokens
from specllama.llama.grammar import tokenizer_for
from specllama.llama.library import build_facts
from specllama.llama.mtp import MtpHead
from specllama.models.compat import pairing
from specllama.models.hardware import gpu_backend
from specllama.policy import calibration, trust
from specllama.policy.controller import CROSS_MODEL_PRIOR, AdaptiveController
from specllama.policy.costs import Costs
from specllama.session.config import EngineConfig
from specllama.session.default_slots import auto_slots
from specllama.session.drafter_choice import HEAD_KINDS, check_drafter, head_kind, refuse_fork_head
from specllama.session.prompts import PromptsAndThinking


class Engine(PromptsAndThinking):
    """A loaded target (and draft model, when one is given) with the current drafter choice."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        if kind := head_kind(config.target):
            raise UsageError(
                f"{config.target.name} is a draft head, not a target",
                hint=f"pass it as --draft (--drafter {kind}) beside the model it drafts for",
            )
        if config.draft is not None:
            refuse_fork_head(config.draft)
        # A first look at the workers, where a failure is an error and not llama.cpp's abort.
        self.workers: list[rpc.Worker] = []
        if config.rpc:
            self.workers = rpc.check_workers(config.rpc, version=build_facts().version)
        n_seq = config.n_seq or auto_slots(config)
        self.target = LlamaBackend(
            config.target,
            n_ctx=config.n_ctx * n_seq,
            n_seq=n_seq,
            n_gpu_layers=config.n_gpu_layers,
            n_threads=config.n_threads,
            extra_buffers=config.extra_buffers,
            workers=config.rpc,
            rpc_timeout_s=config.rpc_timeout_s,
            load_mtp=config.mtp,
            batch_invariant=config.exact,
        )
        self.n_seq = self.target.n_seq  # one where the target is recurrent
        if config.n_seq is not None and self.n_seq < config.n_seq:
            self.target.close()
            raise UsageError(
                f"{config.target.name} has recurrent layers: its slots could not be cut back "
                "to any prefix, so it serves one sequence",
                hint="--parallel 1",
            )
        # One line each, for the faces to show: what this pair cannot do here, and why (with
        # --exact, why exactness cannot hold for this target here).
        self.notices: list[str] = list(self.target.exact_problems)
        if self.target.max_rollback == 0:
            self.notices.append(
                f"{config.target.name} has recurrent layers and this llama-cpp-python cannot "
                "roll them back (no n_rs_seq): the target runs alone, without drafts"
            )
        self.mtp_head = MtpHead(self.target) if config.mtp else None
        # A draft head in its own file (--draft HEAD.gguf), of the kind --drafter names.
        self.head: Eagle3Head | DFlashHead | None = None
        if config.drafter in HEAD_KINDS and config.draft is not None:
            head_class = HEAD_KINDS[config.drafter][0]
            self.head = head_class(
                self.target, config.draft, n_gpu_layers=config.n_gpu_layers_draft
            )
        self.draft_model: LlamaBackend | None = None
        self.across_tokenizers: str | None = None  # why the draft drafts text, when it does
        if config.draft is not None and config.drafter == "model":
            if kind := head_kind(config.draft):
                raise UsageError(
                    f"{config.draft.name} is a draft head, not a model that runs alone",
                    hint=f"--drafter {kind}",
                )
            self.draft_model = LlamaBackend(
                config.draft,
                n_ctx=config.n_ctx * self.n_seq,
                n_seq=self.n_seq,
                n_gpu_layers=config.n_gpu_layers_draft,
                n_threads=config.n_threads,
                extra_buffers=config.extra_buffers,
                batch_invariant=config.exact,
            )
            # Another vocabulary: the draft's text is re-tokenised for the target (one line
            # to say so); one whose text cannot round-trip is refused.
            self.across_tokenizers = pairing(self.draft_model, self.target)
            if self.across_tokenizers:
                self.notices.append(self.across_tokenizers)
        # Earlier prompts and answers, drafted from by n-gram lookup (all of a server's clients
        # share it); `specllama.models.memory_store` keeps it on disk when asked to.
        self.memory = TokenMemory()
        self._memory_key = ""
        if config.remember is not None:
            self._recall(config.remember)
        self.drafter = self.make_drafter(config.drafter)
        self.draft_max = config.draft_max
        self.adaptive_draft_max = config.adaptive_draft_max
        self.calibration: calibration.Calibration | None = None
        self.controller: DraftController | None = None  # adaptive: kept across generations
        self.pipelining = True  # the draft model may draft the next round beside a verify
        # Its rounds share their steps with other sequences (a server's slot): their times are
        # not what a round of one sequence costs, so they are not held against the calibration.
        self.batched = False

    def for_sequences(self, target: EvaluatedTokens, draft: EvaluatedTokens | None) -> Engine:
        """This engine as one of a server's slots runs it: the same models, calibration and
        memory, through views of its own sequences of them (`specllama.llama.sequences`),
        with its own drafter and controller; no drafting on a second thread (the slots'
        decodes are batched on one)."""
        slot = copy.copy(self)
        slot.target, slot.draft_model = target, draft  # type: ignore[assignment]
        slot.drafter = slot.make_drafter(self.config.drafter)
        slot.controller = None
        slot.pipelining = False
        slot.batched = True
        return slot

    def drafter_choices(self) -> list[str]:
        """The drafters `make_drafter` can make with the models loaded."""
        loaded = [("model", self.draft_model), ("mtp", self.mtp_head)]
        if self.head is not None:
            loaded.append((self.head.kind, self.head))
        return [*(name for name, part in loaded if part is not None), "ngram", "none"]

    def make_drafter(self, name: str) -> Drafter:
        if name == "model":
            if self.draft_model is None:
                raise UsageError("no draft model is loaded: start with --draft or --pair")
            model: Drafter = DraftModelDrafter(self.draft_model)
            if self.across_tokenizers:
                model = CrossTokenizerDrafter(self.draft_model, self.target)
            return CombinedDrafter(model, self._ngram()) if self.config.adaptive else model
        if name == "mtp":
            if self.mtp_head is None:
                raise UsageError(
                    "the model's own draft head is not loaded", hint="start with --drafter mtp"
                )
            head = MtpDrafter(self.mtp_head)
            return CombinedDrafter(head, self._ngram()) if self.config.adaptive else head
        if name in HEAD_KINDS:
            if self.head is None or self.head.kind != name:
                raise UsageError(f"no {name} head is loaded", hint="start with --draft HEAD.gguf")
            head = HEAD_KINDS[name][1](self.head)
            return CombinedDrafter(head, self._ngram()) if self.config.adaptive else head
        if name == "ngram":  # adaptive: longer n-grams, whose length tells a copy from a guess
            return self._ngram()
        return NoDrafter()

    def _ngram(self) -> NgramDrafter:
        return NgramDrafter(self.memory)

    def use_drafter(self, name: str) -> None:
        check_drafter(name)
        self.drafter = self.make_drafter(name)

    def _recall(self, folder: Path) -> None:
        """Load the memory kept for this vocabulary in `folder` (a damaged one: a notice)."""
        self._memory_key = vocabulary_key(self.target)
        tokens, notice = memory_store.load_tokens(folder, self._memory_key, self.target.n_vocab)
        self.memory.load(tokens)
        if notice:
            self.notices.append(notice)

    def save_memory(self) -> None:
        """Write the memory to the --remember folder, if there is one."""
        if self.config.remember is not None:
            memory_store.save_tokens(self.config.remember, self._memory_key, self.memory.tokens())

    def close(self) -> None:
        try:
            self.save_memory()
        finally:
            if self.mtp_head is not None:
                self.mtp_head.close()  # before the target: its context refers to the target's
            if self.head is not None:
                self.head.close()  # so does this one
            self.target.close()
            if self.draft_model is not None:
                self.draft_model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def compile_constraint(self, spec: ConstraintSpec) -> Grammar:
        """`spec` compiled for the target's vocabulary (ConstraintError if it cannot be);
        each generation takes a fresh matcher from it."""
        return compile_constraint(spec, tokenizer_for(self.target), self.target.n_vocab)

    # -- generation -------------------------------------------------------------------------

    def generate(
        self,
        prompt: list[int],
        params: SamplingParams,
        *,
        max_tokens: int,
        controller: DraftController | None = None,
        drafter: Drafter | None = None,
        constraint: Grammar | None = None,
        prediction: list[int] | None = None,
    ) -> Iterator[Event]:
        """The loop's events, drafting with `drafter` (default: the current choice); the answer
        satisfies `constraint` when one is given (`compile_constraint`); n-gram lookup also
        drafts from `prediction`, the answer the client expects (its stats say how much of it
        was kept). The prompt and the answer are remembered (`memory`) once it ends."""
        drafter = drafter or self.drafter
        if isinstance(drafter, NoDrafter):
            controller = FixedLength(0)
        controller = controller or self.default_controller()
        events = generate(
            self.target,
            drafter,
            prompt,
            params,
            max_tokens=max_tokens,
            controller=controller,
            constraint=constraint.start() if constraint is not None else None,
            pipelining=self.pipelining,
        )
        events = self._remembered(events, prompt, drafter, prediction)
        if controller is not self.controller or self.batched:
            return events
        return self._reviewed(events)

    def _reviewed(self, events: Iterator[Event]) -> Iterator[Event]:
        """The loop's events; once it is done, its rounds are checked against the cached
        calibration (`review_calibration`), and what they cost besides is kept with it."""
        yield from events
        self.review_calibration()
        self.keep_learnt()

    def _remembered(
        self,
        events: Iterator[Event],
        prompt: list[int],
        drafter: Drafter,
        prediction: list[int] | None,
    ) -> Iterator[Event]:
        """The loop's events, with n-gram lookup drafting from `prediction` meanwhile, and the
        prompt and answer added to memory after (also when the consumer stops early)."""
        ngram = _ngram_of(drafter)
        predicted = Prediction(prediction, len(prompt)) if prediction and ngram else None
        if ngram is not None:
            ngram.use_prediction(predicted)
        answer: list[int] = []
        try:
            for event in events:
                if isinstance(event, TokenEvent):
                    answer.append(event.token)
                elif isinstance(event, FinishEvent) and predicted is not None:
                    event.stats.prediction_accepted = predicted.accepted
                    event.stats.prediction_rejected = predicted.rejected
                yield event
        finally:
            if ngram is not None:
                ngram.use_prediction(None)
            self.memory.add([*prompt, *answer])

    # -- measured costs and the controller ------------------------------------------------

    def calibrate(
        self, *, refresh: bool = False, on_measure: Callable[[str], None] | None = None
    ) -> Costs:
        """This machine's costs for these models: cached, or measured now (a few seconds)."""
        if self.calibration is None or refresh:
            self.calibration = calibration.load_or_measure(
                self._calibration_key(),
                self.target,
                self.draft_model or self.mtp_head or self.head,
                refresh=refresh,
                on_measure=on_measure,
                side_by_side=self.both_on_gpu,
            )
        return self.calibration.costs

    @property
    def costs(self) -> Costs | None:
        return self.calibration.costs if self.calibration is not None else None

    def _calibration_key(self) -> dict[str, object]:
        loaded = self.draft_model or self.head
        draft = self.config.draft if loaded is not None else None
        return calibration.calibration_key(
            self.config.target,
            self.config.target if self.mtp_head is not None else draft,  # its own head
            n_threads=self.config.n_threads or default_threads(),
            n_gpu_layers=self.config.n_gpu_layers,
            n_gpu_layers_draft=self.config.n_gpu_layers_draft,
            llama_version=build_facts().version,
            extra_buffers=self.target.extra_buffers,
            exact=self.config.exact,
            workers=[(w.endpoint, w.total_bytes) for w in self.workers],
        )

    def review_calibration(self) -> str | None:
        """After a generation: when its rounds contradict the cached calibration, mark it
        stale (the next run measures again) and say why; None when they agree."""
        controller, measured = self.controller, self.calibration
        if not isinstance(controller, AdaptiveController) or measured is None:
            return None
        if measured.source != "cache":
            return None
        curve = controller.live.verify_curve
        reason = trust.disagreement(
            measured.costs, lambda n: (curve.observed(n) or 0.0, curve.count(n))
        )
        if reason is not None:
            calibration.mark_stale(self._calibration_key(), reason)
        return reason

    def keep_learnt(self) -> None:
        """After a generation: what its rounds cost beyond the decodes (Python time, draft steps
        in the loop) is kept with the cached calibration, for the next run to start from."""
        controller = self.controller
        if not isinstance(controller, AdaptiveController) or self.calibration is None:
            return
        learnt = controller.live.learnt()
        if learnt is not None:
            calibration.save_learnt(self._calibration_key(), learnt)

    @property
    def device(self) -> str:
        """Where the target runs, in a few words: "CPU, 2 threads", "GPU (CUDA)"..."""
        build, config = build_facts(), self.config
        if build.gpu_offload and config.n_gpu_layers != 0:
            where = f"GPU ({gpu_backend(build)})"
        else:
            where = f"CPU, {self.target.n_threads} threads"
        return where + (f", layers on {len(config.rpc)} RPC workers" if config.rpc else "")

    @property
    def both_on_gpu(self) -> bool:
        """Both models offloaded to a GPU: only then can they decode side by side (pipelined
        drafting); on CPU cores they take turns (`calibration.measure_overlap`)."""
        config = self.config
        offloaded = config.n_gpu_layers != 0 and config.n_gpu_layers_draft != 0
        return offloaded and self.draft_model is not None and build_facts().gpu_offload

    def new_controller(self, *, adaptive: bool | None = None) -> DraftController:
        """A fresh controller: adaptive (calibrating first if needed) or fixed at draft_max."""
        if not (self.config.adaptive if adaptive is None else adaptive):
            return FixedLength(self.draft_max)
        priors = {MODEL: CROSS_MODEL_PRIOR} if self.across_tokenizers else None
        return AdaptiveController(
            self.calibrate(), draft_max=self.adaptive_draft_max, priors=priors
        )

    def default_controller(self) -> DraftController:
        if self.controller is None:
            self.controller = self.new_controller()
        return self.controller


def vocabulary_key(target: LlamaBackend) -> str:
    """A short digest of every token's text: what a remembered token id means."""
    digest = hashlib.sha256()
    for token in range(target.n_vocab):
        digest.update(target.token_text(token) + b"\0")
    return digest.hexdigest()[:16]


def _ngram_of(drafter: Drafter) -> NgramDrafter | None:
    """The n-gram lookup a drafter drafts with, if any."""
    if isinstance(drafter, NgramDrafter):
        return drafter
    return drafter.ngram if isinstance(drafter, CombinedDrafter) else None
