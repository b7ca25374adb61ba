"""Running the server: the socket bound before the models load, the ready banner's facts, and
uvicorn serving the app (app) until Ctrl-C or SIGTERM, which stop it the same way: the queue
stops its slots, the streaming answers end by themselves, the queue closes before the models
are freed.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator

import uvicorn

from specllama.errors import SpecllamaError
from specllama.server.app import Settings, create_app
from specllama.server.prompt_cache import PromptCache, unusable
from specllama.server.queue import GenerationQueue
from specllama.session import Engine

log = logging.getLogger("specllama.server.app")  # every server module's: `serve` shows it

GRACEFUL_SHUTDOWN_S = 2  # then a streaming answer is cancelled, so Ctrl-C never hangs


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
        f"ctx {engine.target.n_ctx}{_slots_fact(engine.n_seq)}, "
        f"{settings.max_waiting} may wait"
        f" · temperature {settings.defaults.temperature:g} when a request sets none{key}",
        _cache_fact(engine, settings.cache_bytes),
        *([EXACT_FACT] if config.exact else []),
        "Ctrl-C stops the server",
    ]


EXACT_FACT = (
    "exact (--exact): a verified token gets the logits it gets alone, so every answer is the "
    "target alone's"
)


def _slots_fact(n_slots: int) -> str:
    if n_slots == 1:
        return " · one generation at a time (--parallel 1)"
    return f" per slot · {n_slots} generations at once (--parallel {n_slots})"


def _cache_fact(engine: Engine, limit_bytes: int) -> str:
    if limit_bytes <= 0:
        return "prompt cache off (--cache-ram 0)"
    if why := unusable(engine):
        return f"prompt cache off: {why}"
    return f"prompt cache in RAM: up to {limit_bytes // 2**20} MB of earlier prompts (--cache-ram)"


class _Terminated(Exception):
    """SIGTERM, as uvicorn raises it again once it has stopped."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises _Terminated meanwhile (as Ctrl-C raises KeyboardInterrupt), so that the
    server stops as on Ctrl-C: the slots finish, the memory is saved, exit status 0."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are the main thread's
        return

    def terminated(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, queue: GenerationQueue) -> None:
        super().__init__(config)
        self.queue = queue

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Cancelled jobs end their responses by themselves, well within the graceful period,
        # instead of uvicorn cancelling the tasks that stream them; the decode under way is
        # aborted, so that a long prompt's chunk does not hold the process.
        self.queue.stop()
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
    GenerationQueue), then `on_ready`. On Ctrl-C or SIGTERM the running generations stop at
    their next event, and their responses end with an error chunk (streamed) or a 503."""
    cache = PromptCache(engine, settings.cache_bytes)
    queue = GenerationQueue(engine, max_waiting=settings.max_waiting, prepare=prepare, cache=cache)
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
        with _sigterm_raises():
            _Server(config, queue).run(sockets=[sock])
    except (KeyboardInterrupt, _Terminated):
        pass  # uvicorn raises the signal it handled again once it has stopped: done
    finally:
        queue.close()  # before the caller frees the models
