"""`specllama serve`: OpenAI's HTTP API (Starlette on uvicorn) over one loaded Engine.

Routes: GET /health, GET /v1/models[/{id}], POST /v1/chat/completions, POST /v1/completions,
streamed as server-sent events (`data: {...}` chunks, then `data: [DONE]`) or whole; the chat
page at / (server_page) and what it shows of the server at GET /specllama/status. Every
request passes the guard first (server_guard: Host, Origin, JSON bodies).

A request is checked (server_requests), tokenised off the event loop (through the model's own
chat template, with the client's tools), its output rule compiled there too (response_format,
grammar, or the call a tool_choice forces; the last few kept), and queued: generations run one
at a time on the queue's worker thread (server_queue), and their text comes back here as
chunks or one body (server_responses), read for tool calls when tools were offered. Every error
a client can cause is answered in OpenAI's error shape; anything else is a 500 with one log
line, never a dead server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import os
import socket
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from specllama.chat import Message
from specllama.engine.constraint import ConstraintSpec, Grammar
from specllama.engine.sampling import SamplingParams
from specllama.errors import ConstraintError, SpecllamaError
from specllama.reasoning import opens_thinking, template_thinks
from specllama.server import anthropic, openai_chat, openai_responses
from specllama.server.fields import ApiError, parse_json
from specllama.server.guard import Guard, host_names
from specllama.server.page import page_routes
from specllama.server.queue import (
    Cancelled,
    Done,
    Failed,
    GenerationQueue,
    Job,
    QueueFull,
    Text,
    Work,
)
from specllama.server.request import GenerationRequest
from specllama.server.wire import Answer, Served, Wire, sse
from specllama.session import Engine
from specllama.tool_calls import ToolFormat, call_grammar, detect_format, template_knows_tools

log = logging.getLogger("specllama.server.app")

MAX_BODY_BYTES = 8 * 1024 * 1024
RETRY_AFTER_S = 1
GRACEFUL_SHUTDOWN_S = 2  # then a streaming answer is cancelled, so Ctrl-C never hangs
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
GRAMMARS_KEPT = 16  # compiled output rules kept: clients send the same schema again and again


@dataclass(frozen=True)
class Settings:
    model_id: str  # the name /v1/models lists first and answers carry; requests may use any
    api_key: str | None = None
    max_waiting: int = 8  # requests queued behind the running one; beyond: 503
    defaults: SamplingParams = field(default_factory=SamplingParams)  # what a request omits
    max_body_bytes: int = MAX_BODY_BYTES
    host: str = "127.0.0.1"  # the address served: requests must name it (or an address)
    cors: tuple[str, ...] = ()  # origins whose pages may call the API ("*": any)
    allowed_hosts: tuple[str, ...] = ()  # names besides host, localhost and this machine's
    aliases: tuple[str, ...] = ()  # more names /v1/models lists (--alias)


Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Prepared:
    """What a request becomes before it is queued."""

    prompt: list[int]
    constraint: Grammar | None  # the rule the answer follows
    tool_format: ToolFormat | None  # the answer is read for tool calls in this syntax
    prediction: list[int] | None = None  # the answer the client expects, as tokens
    thinking: bool | None = None  # see Served.thinking


class Grammars:
    """Output rules compiled for the target's vocabulary, the last few kept. Compiling runs on
    the request's thread (off the event loop); the worker only reads compiled ones."""

    def __init__(self, engine: Engine, kept: int = GRAMMARS_KEPT) -> None:
        self._engine = engine
        self._kept = kept
        self._compiled: OrderedDict[ConstraintSpec, Grammar] = OrderedDict()
        self._special: dict[str, bool] = {}
        self._lock = threading.Lock()

    def get(self, spec: ConstraintSpec) -> Grammar:
        """The compiled rule (ConstraintError if it cannot be compiled or admits nothing)."""
        with self._lock:
            if spec in self._compiled:
                self._compiled.move_to_end(spec)
                return self._compiled[spec]
        grammar = self._engine.compile_constraint(spec)
        with self._lock:
            self._compiled[spec] = grammar
            while len(self._compiled) > self._kept:
                self._compiled.popitem(last=False)
        return grammar

    def special(self, markers: tuple[str, ...]) -> set[str]:
        """Which of `markers` (`<tool_call>`...) are special tokens of the vocabulary: a
        grammar must write those as tokens, for the model writes them as one token."""
        for marker in markers:
            if marker not in self._special:
                try:
                    self.get(ConstraintSpec("lark", f"start: {marker}\n"))
                    self._special[marker] = True
                except ConstraintError:
                    self._special[marker] = False
        return {m for m in markers if self._special[m]}


class Api:
    def __init__(self, engine: Engine, queue: GenerationQueue, settings: Settings) -> None:
        self.engine = engine
        self.queue = queue
        self.settings = settings
        self.created = int(engine.config.target.stat().st_mtime)
        self.grammars = Grammars(engine)

    # -- routes -----------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        busy = {"generating": int(self.queue.running is not None), "waiting": self.queue.waiting}
        return JSONResponse({"status": "ok", "model": self.settings.model_id, **busy})

    async def models(self, request: Request) -> Response:
        cards = [self._model_card(name) for name in self._names()]
        return JSONResponse({"object": "list", "data": cards})

    async def model(self, request: Request) -> Response:
        name = request.path_params["model"]
        if name not in self._names():
            raise ApiError(
                404,
                f"The model '{name}' is not listed: this server serves "
                f"{', '.join(map(repr, self._names()))} (GET /v1/models), and answers requests "
                "that name any model with it.",
                param="model",
                code="model_not_found",
            )
        return JSONResponse(self._model_card(name))

    async def status(self, request: Request) -> Response:
        """What the page shows of the server: the pair, the drafters, context, device."""
        config, defaults = self.engine.config, self.settings.defaults
        return JSONResponse(
            {
                "model": self.settings.model_id,
                "target": _file_facts(config.target),
                "draft": _file_facts(config.draft) if self.engine.draft_model else None,
                "drafter": self.engine.drafter.name,
                "drafters": ["auto", *self.engine.drafter_choices()],
                "adaptive": config.adaptive,
                "draft_max": self.engine.draft_max,
                "n_ctx": self.engine.target.n_ctx,
                "device": self.engine.device,
                "defaults": dataclasses.asdict(defaults),
            }
        )

    async def count_tokens(self, request: Request) -> Response:
        """Anthropic's count_tokens: the prompt's tokens as the model's template writes them."""
        body = parse_json(await _read_body(request, self.settings.max_body_bytes))
        asked = anthropic.parse_count(body)
        prompt = await run_in_threadpool(self._prompt_tokens, asked, self._tool_format(asked))
        return JSONResponse({"input_tokens": len(prompt)})

    async def not_served(self, request: Request) -> Response:
        """What an agent calls besides its API: answered at once, with nothing."""
        log.debug("%s %s: answered with nothing", request.method, request.url.path)
        return JSONResponse({})

    def routes(self) -> list[Route]:
        answering = [
            ("/v1/chat/completions", openai_chat.CHAT),
            ("/v1/completions", openai_chat.COMPLETIONS),
            ("/v1/responses", openai_responses.RESPONSES),
            ("/v1/messages", anthropic.MESSAGES),
        ]
        return [
            *page_routes(),
            Route("/health", _errors_as_json(self.health)),
            Route("/specllama/status", self._guarded(self.status)),
            Route("/v1/models", self._guarded(self.models)),
            Route("/v1/models/{model:path}", self._guarded(self.model)),
            *[
                Route(path, self._guarded(self._completion(wire), wire), methods=["POST"])
                for path, wire in answering
            ],
            Route(
                "/v1/messages/count_tokens",
                self._guarded(self.count_tokens, anthropic.MESSAGES),
                methods=["POST"],
            ),
            # Claude Code's own routes beside the API (HEAD /api/hello before it starts, its
            # event logging): answered, so that it neither waits nor retries.
            Route("/api/{rest:path}", self.not_served, methods=["GET", "POST"]),
        ]

    # -- checks -----------------------------------------------------------------------------

    def _guarded(self, handler: Handler, wire: Wire = openai_chat.CHAT) -> Handler:
        async def guarded(request: Request) -> Response:
            self._authorize(request)
            return await handler(request)

        return _errors_as_json(guarded, wire.error_body)

    def _authorize(self, request: Request) -> None:
        expected = self.settings.api_key
        if expected is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        bearer = given.strip() if scheme.lower() == "bearer" else None
        key = request.headers.get("x-api-key")  # Anthropic's clients send the key so
        # Constant time: how long a wrong key takes must not tell how much of it was right.
        if not any(_same(sent, expected) for sent in (bearer, key) if sent is not None):
            raise ApiError(
                401,
                "Incorrect API key provided: send 'Authorization: Bearer KEY' (or 'x-api-key: "
                "KEY') with the key the server was started with (--api-key or "
                "SPECLLAMA_API_KEY).",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def _check_drafter(self, drafter: str | None) -> None:
        choices = self.engine.drafter_choices()
        if drafter is not None and drafter not in choices:
            raise ApiError(
                400,
                f"Invalid value for 'specllama.drafter': {drafter!r}; with the models this "
                f"server loaded, choose one of auto, {', '.join(choices)}.",
                param="specllama.drafter",
                code="invalid_value",
            )

    def _names(self) -> list[str]:
        """The served model's names: its own, then the aliases."""
        names = [self.settings.model_id, *self.settings.aliases]
        return list(dict.fromkeys(names))

    def _model_card(self, name: str) -> dict[str, object]:
        card = {"id": name, "object": "model", "created": self.created}
        return {**card, "owned_by": "specllama"}

    # -- completions ------------------------------------------------------------------------

    def _completion(self, wire: Wire) -> Handler:
        async def complete(request: Request) -> Response:
            return await self._complete(request, wire)

        return complete

    async def _complete(self, request: Request, wire: Wire) -> Response:
        asked = wire.parse(parse_json(await _read_body(request, self.settings.max_body_bytes)))
        self._check_drafter(asked.drafter)
        if self.queue.full():  # refused before the work of tokenising (submit checks again)
            raise self._busy()
        # Tokenising a long prompt and compiling a schema take a while: off the event loop,
        # beside the generation (the vocabulary is read-only, so the worker thread may decode
        # meanwhile).
        prepared = await run_in_threadpool(self._prepare, asked)
        prompt = prepared.prompt
        params = asked.sampling_params(self.settings.defaults)
        max_tokens = self._max_tokens(prompt, asked)
        work = Work(
            prompt,
            params,
            max_tokens,
            asked.stop,
            asked.drafter,
            prepared.constraint,
            prepared.prediction,
        )
        job = Job(work)
        try:
            self.queue.submit(job)
        except QueueFull:
            raise self._busy() from None
        served = Served(
            self.settings.model_id, prepared.tool_format, len(prompt), prepared.thinking
        )
        answer = wire.answer(asked, served)
        if asked.stream:
            return StreamingResponse(
                self._stream(job, answer, wire), media_type="text/event-stream", headers=SSE_HEADERS
            )
        return JSONResponse(await self._collect(request, job, answer, wire))

    def _busy(self) -> ApiError:
        return ApiError(
            503,
            "The server is busy: it runs one generation at a time, and the queue of requests "
            f"waiting for their turn (--queue {self.settings.max_waiting}) is full. Retry shortly.",
            code="server_busy",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )

    def _prepare(self, asked: GenerationRequest) -> Prepared:
        tool_format = self._tool_format(asked)
        prompt = self._prompt_tokens(asked, tool_format)
        predicted = None
        if asked.prediction is not None:  # its text as the answer would hold it
            predicted = self.engine.text_tokens(asked.prediction)
        constraint = self._constraint(asked, tool_format)
        return Prepared(prompt, constraint, tool_format, predicted, self._thinking(asked, prompt))

    def _thinking(self, asked: GenerationRequest, prompt: list[int]) -> bool | None:
        """Whether the answer may think (the template knows the tags), and begins inside the
        thinking (the prompt opened it)."""
        if asked.prompt is not None or not template_thinks(self.engine.target.chat_template):
            return None
        return opens_thinking(self.engine.target.detokenize(prompt[-4:]))

    def _tool_format(self, asked: GenerationRequest) -> ToolFormat | None:
        """The syntax the model writes calls in, when the request offers tools; a model whose
        template knows no tools is refused when the request needs them."""
        history = any(m.tool_calls or m.role == "tool" for m in asked.messages)
        if not (asked.uses_tools or history):
            return None
        template = self.engine.target.chat_template
        if template is None or not template_knows_tools(template):
            why = (
                "has no chat template" if template is None else "has a chat template without tools"
            )
            raise ApiError(
                400,
                f"The model '{self.settings.model_id}' cannot use tools: it {why}, so it was "
                "never shown how to call a function. Serve a model whose template knows tools "
                "(Qwen2.5, Llama 3.1+, Mistral...), or send no tools and no tool messages.",
                param="tools" if asked.tools else "messages",
                code="tools_not_supported",
            )
        names = [tool.name for tool in asked.tools]
        return detect_format(template, names) if asked.uses_tools else None

    def _prompt_tokens(self, asked: GenerationRequest, tool_format: ToolFormat | None) -> list[int]:
        try:
            if asked.prompt is not None:  # a text completion: the prompt as it is
                as_is = [Message("user", asked.prompt)]
                return self.engine.prompt_tokens(as_is, chat_template=False)
            tools = [tool.as_openai() for tool in asked.tools] if tool_format else None
            return self.engine.prompt_tokens(list(asked.messages), tools=tools)
        except SpecllamaError as exc:  # the model's chat template refused these messages
            raise ApiError(400, str(exc), param="messages", code="invalid_value") from None

    def _constraint(self, asked: GenerationRequest, fmt: ToolFormat | None) -> Grammar | None:
        """The compiled rule: the forced call, response_format or grammar, or a JSON answer
        or a call (response_format beside tools the model may call)."""
        spec, param = asked.rule, asked.rule_param
        if fmt is not None and (asked.forces_call or spec is not None):
            special = self.grammars.special(fmt.markers)
            reply = _reply_schema(spec) if not asked.forces_call else None
            tools = asked.forced_tools()
            # A named function is one call (as OpenAI answers it, and as instructor expects);
            # "required" may be several when parallel calls are allowed.
            parallel = asked.parallel_tool_calls and asked.tool_choice != "function"
            lark = call_grammar(fmt, tools, parallel=parallel, special=special, or_json=reply)
            spec, param = ConstraintSpec("lark", lark), param or "tools"
        if spec is None:
            return None
        try:
            return self.grammars.get(spec)
        except Exception as exc:  # the rule is the client's: whatever fails to compile is its
            if not isinstance(exc, ConstraintError):  # (the GBNF reader raises plain ones)
                exc = ConstraintError(f"the rule cannot be compiled: {exc}")
            code = "invalid_grammar" if param == "grammar" else "invalid_schema"
            raise ApiError(400, f"Invalid '{param}': {exc}", param=param, code=code) from None

    def _max_tokens(self, prompt: list[int], asked: GenerationRequest) -> int:
        """The prompt must leave room for one new token; generation ends at a full context."""
        n_ctx, n_prompt = self.engine.target.n_ctx, len(prompt)
        param = "prompt" if asked.prompt is not None else "messages"
        if n_prompt == 0:
            raise ApiError(400, "The prompt is empty.", param=param, code="invalid_value")
        if n_prompt >= n_ctx:
            raise ApiError(
                400,
                f"This model's maximum context length is {n_ctx} tokens. However, your "
                f"{param} resulted in {n_prompt} tokens. Please reduce the length of the "
                f"{param}, or restart the server with a larger --ctx.",
                param=param,
                code="context_length_exceeded",
            )
        room = n_ctx - n_prompt
        return room if asked.max_tokens is None else min(asked.max_tokens, room)

    async def _stream(self, job: Job, answer: Answer, wire: Wire) -> AsyncIterator[str]:
        # On a client disconnect Starlette cancels this generator at its await: `finally`
        # then cancels the job, which stops at the next round.
        try:
            for event in answer.opening():
                yield sse(event)
            async for output in job.outputs():
                if isinstance(output, Text):
                    events = answer.text(output)
                elif isinstance(output, Done):
                    self._report(wire, output)
                    events = answer.final(output)
                else:  # headers are sent: the error goes in the stream
                    events = answer.failure(_failure(output))
                for event in events:
                    yield sse(event)
            yield answer.closing()
        finally:
            self.queue.cancel(job)

    async def _collect(
        self, request: Request, job: Job, answer: Answer, wire: Wire
    ) -> dict[str, object]:
        watcher = asyncio.create_task(_on_disconnect(request, lambda: self.queue.cancel(job)))
        try:
            pieces: list[str] = []
            async for output in job.outputs():
                if isinstance(output, Text):
                    pieces.append(output.text)
                elif isinstance(output, Done):
                    self._report(wire, output)
                    return answer.whole("".join(pieces), output)
                else:
                    raise _failure(output)
            raise AssertionError("a job always ends with Done or Failed")
        finally:
            watcher.cancel()
            self.queue.cancel(job)

    def _report(self, wire: Wire, done: Done) -> None:
        s = done.stats
        accepted = f", accepted {s.acceptance_rate:.0%} of {s.n_drafted}" if s.n_drafted else ""
        log.info(
            "%s: %d tokens in %.2f s (%.1f tok/s), drafter %s%s, prompt %d tokens (%d cached), "
            "finish %s",
            wire.name,
            s.n_generated,
            s.time_s,
            s.tokens_per_s,
            s.drafter,
            accepted,
            s.n_prompt,
            done.n_prompt_reused,
            s.finish_reason,
        )


def _reply_schema(spec: ConstraintSpec | None) -> dict[str, object] | None:
    """response_format's schema, for a grammar that also allows calls."""
    if spec is None:
        return None
    schema = json.loads(spec.source) if spec.kind == "json_schema" else {"type": "object"}
    return schema if isinstance(schema, dict) else {}


def _file_facts(path: Path) -> dict[str, object]:
    return {"file": path.name, "bytes": path.stat().st_size}


def _same(given: str, expected: str) -> bool:
    # Starlette decodes header bytes as latin-1: encoding back gives the bytes as sent.
    return hmac.compare_digest(given.encode("latin-1"), expected.encode())


def _failure(output: Failed) -> ApiError:
    """A generation that failed: the server's fault, not the request's."""
    if isinstance(output.error, Cancelled):  # nobody is listening, or the server stops
        return ApiError(503, "The generation was cancelled.", code="cancelled")
    _log_unexpected("the generation failed", output.error)
    return ApiError(500, f"The generation failed: {output.error}", code="generation_failed")


def _log_unexpected(what: str, exc: BaseException) -> None:
    debug = os.environ.get("SPECLLAMA_DEBUG") == "1"
    log.error("%s: %s: %s", what, type(exc).__name__, exc, exc_info=exc if debug else None)


async def _read_body(request: Request, limit: int) -> bytes:
    too_big = ApiError(
        413, f"The request body is larger than {limit} bytes.", code="request_too_large"
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big  # refused before reading it
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_big
    return bytes(body)


async def _on_disconnect(request: Request, then: Callable[[], None]) -> None:
    """Call `then` when the client closes the connection (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    then()


def _errors_as_json(
    handler: Handler, envelope: Callable[[ApiError], dict[str, Any]] = ApiError.body
) -> Handler:
    """ApiError -> its status and the API's error body; anything else -> 500 and a log line."""

    async def answered(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return JSONResponse(envelope(exc), status_code=exc.status, headers=exc.headers)
        except Exception as exc:
            _log_unexpected(f"{request.method} {request.url.path}", exc)
            error = ApiError(500, f"Internal server error: {type(exc).__name__}")
            return JSONResponse(envelope(error), status_code=500)

    return answered


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown path 404, wrong method 405) in the API's shape."""
    assert isinstance(exc, HTTPException)
    log.info("%s %s: %d", request.method, request.url.path, exc.status_code)
    error = ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")
    body = anthropic.envelope_for(request.url.path)(error)
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


def create_app(engine: Engine, queue: GenerationQueue, settings: Settings) -> Starlette:
    api = Api(engine, queue, settings)
    hosts = host_names(settings.host, settings.allowed_hosts)
    guard = Middleware(Guard, hosts=hosts, cors=settings.cors)
    return Starlette(
        routes=api.routes(), middleware=[guard], exception_handlers={HTTPException: _http_error}
    )


# -- running it ---------------------------------------------------------------------------------


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port, before the models load, so a taken port fails fast.
    It listens only once the server is ready: until then clients are refused, not kept
    waiting."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        raise SpecllamaError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="choose another --port (0 picks a free one), or stop what uses this one",
        ) from None
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def startup_facts(engine: Engine, settings: Settings) -> list[str]:
    """What the ready banner says under the URL."""
    config = engine.config
    drafter = f"drafter {engine.drafter.name}"
    if config.draft is not None:
        drafter = f"draft {config.draft.name} ({engine.drafter.name})"
    mode = "adaptive" if config.adaptive else f"fixed draft-max {engine.draft_max}"
    key = " · API key required" if settings.api_key else ""
    workers = ""
    if config.rpc:
        workers = f" (layers on RPC workers {', '.join(config.rpc)})"
    return [
        f"model {settings.model_id!r}: target {config.target.name}{workers} · {drafter} · {mode}",
        f"ctx {engine.target.n_ctx} · one generation at a time, {settings.max_waiting} may wait"
        f" · temperature {settings.defaults.temperature:g} when a request sets none{key}",
        "Ctrl-C stops the server",
    ]


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, queue: GenerationQueue) -> None:
        super().__init__(config)
        self.queue = queue

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Cancelled jobs end their responses by themselves, well within the graceful period,
        # instead of uvicorn cancelling the tasks that stream them.
        self.queue.cancel_all()
        await super().shutdown(sockets)


def run(
    engine: Engine,
    settings: Settings,
    sock: socket.socket,
    *,
    prepare: Callable[[], None] | None = None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve until Ctrl-C or SIGTERM. `prepare` runs first on the generation thread (see
    GenerationQueue), then `on_ready`. On Ctrl-C the running generation stops at its next
    event, and its response ends with an error chunk (streamed) or a 503."""
    queue = GenerationQueue(engine, max_waiting=settings.max_waiting, prepare=prepare)
    app = create_app(engine, queue, settings)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    sock.listen()  # connections made from here on wait for uvicorn: a browser may be opened
    if on_ready is not None:
        on_ready()
    try:
        _Server(config, queue).run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn raises the Ctrl-C it handled again once it has stopped: done
    finally:
        queue.close()  # before the caller frees the models
