"""What keeps other web sites out of the server, now that it serves a page to a browser.

A page the user visits elsewhere can make their browser send requests to this server:
- through a name of its own that it points at this machine (DNS rebinding, Ollama's
  CVE-2024-28224): refused by the Host header, which then names the other site;
- straight from that page (fetch, or a form it posts): refused by the Origin header, unless it
  is this server's own or an origin the user named with --cors;
- as a "simple" request that a browser sends without asking first (a form's or a text/plain
  body): refused too, since a request that changes anything must be JSON.
Clients that are not browsers send no Origin and pass; their Host is the address they dialled.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specllama.llama.rpc import is_loopback
from specllama.server.anthropic import envelope_for
from specllama.server.fields import ApiError

log = logging.getLogger("specllama.server.app")

ANY_ORIGIN = "*"
CHANGING = ("POST", "PUT", "PATCH", "DELETE")
# The page's scripts and styles come from here, and nothing else runs: model output that
# looks like HTML can never become markup that loads or runs anything.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
PREFLIGHT_HEADERS = {
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": (
        "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta"
    ),
    "Access-Control-Max-Age": "600",
}


def host_names(bound_host: str, allowed: Iterable[str] = ()) -> frozenset[str]:
    """The names (not addresses) this server answers to: the one it was started with, those
    allowed by name (--allow-host) and, when it listens beyond this machine, the machine's own
    names. localhost always."""
    names = {bound_host.lower().strip("[]"), "localhost", *(name.lower() for name in allowed)}
    if not is_loopback(bound_host.lower().strip("[]")):
        machine = socket.gethostname().lower()
        names |= {machine, f"{machine}.local", socket.getfqdn().lower()}
    return frozenset(names)


def host_allowed(host_header: str, names: Iterable[str]) -> bool:
    """An address is always fine (a rebinding attack needs a name of the attacker's)."""
    host = _hostname(host_header)
    if host in names or host.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _hostname(host_header: str) -> str:
    """ "[::1]:8080" -> "::1", "Example.com.:80" -> "example.com"."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host[1:]
    return host.rsplit(":", 1)[0].rstrip(".") if host.count(":") == 1 else host.rstrip(".")


def _media_type(headers: Headers) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


class Guard:
    """ASGI middleware: the checks above, CORS for the origins named, and the page's CSP."""

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str], cors: Iterable[str] = ()) -> None:
        self.app = app
        self.hosts = hosts
        self.cors = frozenset(origin.rstrip("/").lower() for origin in cors)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin", "").rstrip("/").lower()
        own = f"{scope['scheme']}://{headers.get('host', '').lower()}"
        cross = bool(origin) and origin != own
        refusal = self._refusal(scope["method"], headers, origin, cross)
        if refusal is not None:
            log.warning("refused %s %s: %s", scope["method"], scope["path"], refusal.message)
            await _error(refusal, scope["path"])(scope, receive, send)
            return
        extra = {"Access-Control-Allow-Origin": origin, "Vary": "Origin"} if cross else {}
        if cross and scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await Response(status_code=204, headers={**extra, **PREFLIGHT_HEADERS})(
                scope, receive, send
            )
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                for name, value in {**SECURITY_HEADERS, **extra}.items():
                    out[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)

    def _refusal(self, method: str, headers: Headers, origin: str, cross: bool) -> ApiError | None:
        host = headers.get("host")
        if host is not None and not host_allowed(host, self.hosts):
            return ApiError(
                403,
                f"Host {host!r} is not a name of this server; start it with --allow-host "
                f"{_hostname(host)} to serve it under that name.",
                code="host_not_allowed",
            )
        if cross and not ({origin, ANY_ORIGIN} & self.cors):
            return ApiError(
                403,
                f"Requests from web pages at {origin} are refused; start the server with "
                f"--cors {origin} to allow them.",
                code="origin_not_allowed",
            )
        if method in CHANGING and _media_type(headers) != "application/json":
            return ApiError(
                415,
                "Send the request body as JSON, with 'Content-Type: application/json'.",
                code="unsupported_media_type",
            )
        return None


def _error(error: ApiError, path: str) -> Response:
    body = envelope_for(path)(error)
    return JSONResponse(body, status_code=error.status, headers=SECURITY_HEADERS)
