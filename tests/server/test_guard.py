"""The guard in front of the server: Host (DNS rebinding), Origin (other sites' pages), JSON
bodies (forms a page posts without asking), CORS for the origins named, the page's CSP."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from specllama.server.guard import Guard, host_allowed, host_names

HOSTS = host_names("127.0.0.1")


def client(cors: tuple[str, ...] = ()) -> TestClient:
    calls = []

    async def echo(request):
        calls.append(request.method)
        return JSONResponse({"ok": True})

    app = Starlette(
        routes=[Route("/v1/x", echo, methods=["GET", "POST"])],
        middleware=[Middleware(Guard, hosts=HOSTS, cors=cors)],
    )
    test_client = TestClient(app, base_url="http://127.0.0.1:8080")
    test_client.calls = calls
    return test_client


@pytest.mark.parametrize(
    "host, allowed",
    [
        ("127.0.0.1:8080", True),
        ("localhost:8080", True),
        ("LocalHost.:8080", True),
        ("[::1]:8080", True),
        ("192.168.1.7:8080", True),  # an address cannot be rebound to another site
        ("app.localhost:8080", True),
        ("evil.example:8080", False),
        ("127.0.0.1.evil.example", False),
        ("localhost.evil.example:8080", False),
    ],
)
def test_host_names_and_addresses(host: str, allowed: bool):
    assert host_allowed(host, HOSTS) is allowed


def test_names_allowed_by_the_user():
    names = host_names("127.0.0.1", ["Host.Docker.Internal"])
    assert host_allowed("host.docker.internal:8080", names)
    assert not host_allowed("host.docker.internal:8080", HOSTS)


def test_listening_beyond_this_machine_adds_its_own_name(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "Workstation")
    monkeypatch.setattr("socket.getfqdn", lambda: "workstation.lan")
    names = host_names("0.0.0.0")
    assert {"workstation", "workstation.local", "workstation.lan"} <= names
    assert "workstation" not in host_names("127.0.0.1")


def test_a_rebound_name_is_refused_before_the_route_runs():
    c = client()
    reply = c.get("/v1/x", headers={"Host": "evil.example:8080"})
    assert reply.status_code == 403 and reply.json()["error"]["code"] == "host_not_allowed"
    assert c.calls == []


def test_a_page_of_another_origin_is_refused_and_its_simple_post_never_runs():
    c = client()
    hostile = {"Origin": "http://127.0.0.1:9999"}
    reply = c.post("/v1/x", content="{}", headers={**hostile, "Content-Type": "text/plain"})
    assert reply.status_code == 403 and reply.json()["error"]["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in reply.headers
    assert c.get("/v1/x", headers=hostile).status_code == 403
    assert c.calls == []


def test_the_servers_own_page_and_clients_without_an_origin_pass():
    c = client()
    own = {"Origin": "http://127.0.0.1:8080", "Content-Type": "application/json"}
    assert c.post("/v1/x", content="{}", headers=own).status_code == 200
    assert c.post("/v1/x", json={}).status_code == 200  # the openai package, curl -H ...
    assert c.calls == ["POST", "POST"]


def test_a_post_that_is_not_json_is_refused():
    c = client()
    for content_type in ("application/x-www-form-urlencoded", "text/plain", "multipart/form-data"):
        reply = c.post("/v1/x", content="a=b", headers={"Content-Type": content_type})
        assert reply.status_code == 415, content_type
    assert (
        c.post(
            "/v1/x", content="{}", headers={"Content-Type": "Application/JSON; charset=utf-8"}
        ).status_code
        == 200
    )
    assert c.calls == ["POST"]


def test_an_origin_named_with_cors_gets_preflight_and_headers():
    c = client(cors=("http://127.0.0.1:5173",))
    origin = {"Origin": "http://127.0.0.1:5173"}
    preflight = c.options(
        "/v1/x",
        headers={
            **origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "http://127.0.0.1:5173"
    assert "Authorization" in preflight.headers["access-control-allow-headers"]
    reply = c.post("/v1/x", json={}, headers=origin)
    assert reply.status_code == 200
    assert reply.headers["access-control-allow-origin"] == "http://127.0.0.1:5173"
    assert c.get("/v1/x", headers={"Origin": "http://127.0.0.1:5174"}).status_code == 403


def test_any_origin_with_a_star():
    c = client(cors=("*",))
    reply = c.get("/v1/x", headers={"Origin": "https://elsewhere.example"})
    assert reply.status_code == 200
    assert reply.headers["access-control-allow-origin"] == "https://elsewhere.example"


def test_every_answer_carries_the_content_security_policy():
    reply = client().get("/v1/x")
    csp = reply.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert reply.headers["x-content-type-options"] == "nosniff"
    refused = client().get("/v1/x", headers={"Host": "evil.example"})
    assert "content-security-policy" in refused.headers
