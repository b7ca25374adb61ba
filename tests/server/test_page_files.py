"""The page's files: every one in the package is served, and nothing it loads comes from
elsewhere (people run this offline)."""

from __future__ import annotations

import re

from specllama.server.page import PAGE_DIR, TYPES, page_bytes


def test_every_file_of_the_page_is_served_and_only_those():
    assert set(TYPES) == {path.name for path in PAGE_DIR.iterdir()}


def test_the_page_loads_nothing_from_another_origin():
    for name in TYPES:
        text = (PAGE_DIR / name).read_text()
        assert not re.search(
            r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text.replace("http://www.w3.org/2000/svg", "")
        ), name
    html = (PAGE_DIR / "index.html").read_text()
    assert re.findall(r'(?:src|href)="([^"]+)"', html) == [
        "/page/icon.svg",
        "/page/style.css",
        "/page/app.js",
    ]


def test_the_page_is_small():
    assert page_bytes() < 64 * 1024  # what a phone downloads for it, uncompressed
