"""`specllama serve`: the HTTP APIs (Starlette on uvicorn) over one loaded Engine.

Routes: GET /health, GET /slots, GET /metrics (Prometheus' text format: metrics), GET
/v1/models[/{id}], and one POST route per wire format, each its own module that reads its
request into the one request type and writes its answer back, whole or as server-sent events:
/v1/chat/completions and /v1/completions (openai_chat), /v1/responses (openai_responses),
/v1/messages and /v1/messages/count_tokens (anthropic); the chat page at / (page) and what it
shows of the server at GET /specllama/status. Every request passes the guard first (guard:
Host, Origin, JSON bodies).

A request is read by its API, prepared off the event loop (prepare: prompt tokens, tool-call
syntax, output rule) and queued: the queue's slots run the generations, one each, several at
once with --parallel (queue, slots), and their text comes back to the API's Answer, as
events or one body (answering). Every error a client can cause is answered in its API's error
envelope; anything else is a 500 with one log line, never a dead server. Serving the app (the
socket, the ready banner, uvicorn until Ctrl-C or SIGTERM) is `running`'s job.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from specllama.engine.sampling import SamplingParams
from specllama.family.thinking import ReasoningMode
from specllama.server import anthropic, openai_chat, openai_responses
from specllama.server.answering import SSE_HEADERS, collect, failed_stream, log_unexpected, stream
from specllama.server.driver import Work
from specllama.server.fields import ApiError, parse_json
from specllama.server.guard import Guard, host_names
from specllama.server.metrics import CONTENT_TYPE as METRICS_TYPE
from specllama.server.metrics import now_of
from specllama.server.page import page_routes
from specllama.server.prepare import Preparer
from specllama.server.queue import GenerationQueue, Job, QueueFull
from specllama.server.wire import Served, Wire
from specllama.session import Engine

log = logging.getLogger("specllama.server.app")

MAX_BODY_BYTES = 8 * 1024 * 1024
RETRY_AFTER_S = 1
# Seconds of silence after which a stream says it is still working (a long prompt is being
# evaluated): agents give up on a stream that says nothing for a while (Claude Code retried a
# prompt of 18K tokens after ~5 minutes of one `ping`).
KEEPALIVE_S = 5.0
FULL_CONTEXT = "context_length_exceeded"  # the code of a prompt the context cannot hold


@dataclass(frozen=True)
class Settings:
    model_id: str  # the name /v1/models lists first and answers carry; requests may use any
    api_key: str | None = None
    max_waiting: int = 8  # requests waiting for a free slot; beyond: 503
    defaults: SamplingParams = field(default_factory=SamplingParams)  # what a request omits
    max_body_bytes: int = MAX_BODY_BYTES
    host: str = "127.0.0.1"  # the address served: requests must name it (or an address)
    cors: tuple[str, ...] = ()  # origins whose pages may call the API ("*": any)
    allowed_hosts: tuple[str, ...] = ()  # names besides host, localhost and this machine's
    aliases: tuple[str, ...] = ()  # more names /v1/models lists (--alias)
    cache_bytes: int = 0  # the prompt cache's bound (--cache-ram); 0: off
    reasoning: ReasoningMode = "auto"  # thinking on, off, or as the template has it (--reasoning)
    reasoning_budget: int | None = None  # most thinking tokens (--reasoning-budget); None: any
    keepalive_s: float = KEEPALIVE_S  # silence after which a stream says it is alive
    n_predict: int | None = None  # most tokens an answer may have, whatever it asks (--n-predict)


Handler = Callable[[Request], Awaitable[Response]]


class Api:
    def __init__(self, engine: Engine, queue: GenerationQueue, settings: Settings) -> None:
        self.engine = engine
        self.queue = queue
        self.settings = settings
        self.created = int(engine.config.target.stat().st_mtime)
        self.preparer = Preparer(
            engine,
            settings.model_id,
            settings.reasoning,
            settings.reasoning_budget,
            n_predict=settings.n_predict,
        )

    # -- routes -----------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        queue = self.queue
        busy = {"generating": len(queue.running), "waiting": queue.waiting}
        busy["slots"] = queue.pool.size
        cache = queue.cache.facts() if queue.cache is not None else None
        facts = {"status": "ok", "model": self.settings.model_id, **busy, "prompt_cache": cache}
        return JSONResponse(facts)

    async def metrics(self, request: Request) -> Response:
        """Prometheus' text format: the counters since the server started, the gauges now.
        On without a flag (llama-server asks for --metrics): the counting is a few additions
        a round and a scrape only reads them. Behind the API key, as /slots is: it tells as
        much of how the server is used (Prometheus sends the key as its bearer token)."""
        text = self.queue.metrics.render(now_of(self.queue))
        return Response(text, media_type=METRICS_TYPE)

    async def slots(self, request: Request) -> Response:
        """Each slot: busy or free, what its sequence holds, and its answer's figures so far."""
        cache = self.queue.cache.facts() if self.queue.cache is not None else None
        facts = {"slots": self.queue.slot_facts(), "waiting": self.queue.waiting}
        return JSONResponse({**facts, "prompt_cache": cache})

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
                "slots": self.queue.pool.size,
                "exact": config.exact,
                "device": self.engine.device,
                "defaults": dataclasses.asdict(defaults),
            }
        )

    async def count_tokens(self, request: Request) -> Response:
        """Anthropic's count_tokens: the prompt's tokens as the model's template writes them."""
        body = parse_json(await _read_body(request, self.settings.max_body_bytes))
        asked = anthropic.parse_count(body)
        prepare = self.preparer
        prepare.tool_format(asked)  # a model whose template knows no tools refuses them here too
        prompt = await run_in_threadpool(prepare.prompt_tokens, asked)
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
            Route("/slots", self._guarded(self.slots)),
            Route("/metrics", self._guarded(self.metrics)),
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
        prepared = await run_in_threadpool(self.preparer.prepare, asked)
        prompt = prepared.prompt
        params = asked.sampling_params(self.settings.defaults)
        try:
            max_tokens = self.preparer.max_tokens(prompt, asked)
        except ApiError as exc:
            if not (asked.stream and wire.fails_in_stream and exc.code == FULL_CONTEXT):
                raise
            served = Served(self.settings.model_id, prepared.reader, len(prompt))
            events = failed_stream(wire.answer(asked, served), exc)
            return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
        work = Work(
            prompt,
            params,
            max_tokens,
            asked.stop,
            asked.drafter,
            prepared.constraint,
            prepared.prediction,
            prepared.markers,
            prepared.thinking_budget,
        )
        job = Job(work)
        try:
            self.queue.submit(job)
        except QueueFull:
            raise self._busy() from None
        served = Served(self.settings.model_id, prepared.reader, len(prompt))
        answer = wire.answer(asked, served)
        if asked.stream:
            events = stream(self.queue, job, answer, wire, self.settings.keepalive_s)
            return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
        return JSONResponse(await collect(request, self.queue, job, answer, wire))

    def _busy(self) -> ApiError:
        return ApiError(
            503,
            f"The server is busy: its {self.queue.pool.size} slot(s) (--parallel) are answering, "
            f"and the queue of requests waiting for one (--queue {self.settings.max_waiting}) is "
            "full. Retry shortly.",
            code="server_busy",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )


def _file_facts(path: Path) -> dict[str, object]:
    return {"file": path.name, "bytes": path.stat().st_size}


def _same(given: str, expected: str) -> bool:
    # Starlette decodes header bytes as latin-1: encoding back gives the bytes as sent.
    return hmac.compare_digest(given.encode("latin-1"), expected.encode())


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
            log_unexpected(f"{request.method} {request.url.path}", exc)
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
