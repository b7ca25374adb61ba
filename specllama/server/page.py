"""The chat page: static files from the package, served as they are (no build step, nothing
fetched from elsewhere at run time: people run this offline)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

PAGE_DIR = Path(__file__).parent / "page"
# Only these files are served: a name from the URL never becomes a path of its own.
TYPES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "chat.js": "text/javascript; charset=utf-8",
    "markdown.js": "text/javascript; charset=utf-8",
    "render.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}


@cache
def _content(name: str) -> bytes:
    return (PAGE_DIR / name).read_bytes()


def _file(name: str) -> Response:
    # no-cache: the browser asks again each time, so an upgrade never mixes old and new files.
    headers = {"Cache-Control": "no-cache"}
    return Response(_content(name), media_type=TYPES[name], headers=headers)


async def index(request: Request) -> Response:
    return _file("index.html")


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in TYPES:
        raise HTTPException(404)
    return _file(name)


def page_routes() -> list[Route]:
    return [Route("/", index), Route("/page/{name}", asset)]


def page_bytes() -> int:
    """What a browser downloads to show the page: every file, uncompressed."""
    return sum(len(_content(name)) for name in TYPES)
