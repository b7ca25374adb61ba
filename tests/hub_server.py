"""A local stand-in for the Hugging Face hub's file API, enough for huggingface_hub downloads.

hf_hub_download(repo, file) first sends HEAD {endpoint}/{repo}/resolve/{revision}/{file} and needs:
- X-Repo-Commit: the commit the revision points to (else it refuses the server as "not a hub");
- ETag or X-Linked-Etag: names the blob in the cache (for LFS files: the sha256 of the content);
- X-Linked-Size or Content-Length: the expected size;
then GET on the same URL, with `Range: bytes=N-` when it resumes after a dropped connection, which
must be answered 206 with Content-Range.

Knobs for failure tests: `cut_after` drops the first GET's connection after that many bytes;
`corrupt` serves different bytes than the ETag promises. Every request is logged.
"""

from __future__ import annotations

import hashlib
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)$")


@dataclass
class Logged:
    method: str
    path: str
    range: str | None


@dataclass
class HubState:
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    cut_after: int | None = None  # drop the first GET after this many bytes of body
    corrupt: bool = False  # flip a byte of every body (the ETag still names the good content)
    log: list[Logged] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        state = self.server.state
        state.log.append(Logged(self.command, self.path, self.headers.get("Range")))
        match = _RESOLVE.match(unquote(self.path.split("?")[0]))
        content = state.files.get((match["repo"], match["file"])) if match else None
        if content is None:
            self._not_found()
            return
        sha = hashlib.sha256(content).hexdigest()
        start = self._range_start(len(content))
        status = 206 if start else 200
        self.send_response(status)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{sha}"')
        self.send_header("X-Linked-Etag", f'"{sha}"')
        self.send_header("X-Linked-Size", str(len(content)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(content) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
        self.end_headers()
        if body:
            self._send_body(content, start)

    def _range_start(self, size: int) -> int:
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        return min(int(match.group(1)), size) if match else 0

    def _send_body(self, content: bytes, start: int) -> None:
        state = self.server.state
        data = content[start:]
        if state.corrupt and data:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        if state.cut_after is not None:
            cut, state.cut_after = state.cut_after, None  # only the first GET is cut
            self.wfile.write(data[:cut])
            self.wfile.flush()
            # Drop the connection mid-body, as a flaky network would.
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(data)

    def _not_found(self) -> None:
        self.send_response(404)
        self.send_header("X-Error-Code", "EntryNotFound")
        self.send_header("X-Error-Message", "Entry not found")
        self.send_header("Content-Length", "0")
        self.end_headers()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: HubState


class HubServer:
    """`with HubServer() as hub:` serves `hub.state.files` at `hub.url` on a free local port."""

    def __init__(self) -> None:
        self.state = HubState()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = self.state
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, repo: str, filename: str, content: bytes) -> None:
        self.state.files[(repo, filename)] = content

    def gets(self) -> list[Logged]:
        return [entry for entry in self.state.log if entry.method == "GET"]

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def dead_endpoint() -> str:
    """A local URL where nothing listens: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
