"""The header cache: what it keeps of a header, and that a cache written before a header field
existed is read again rather than trusted."""

from __future__ import annotations

import json

from gguf_fakes import vocab, write_gguf

from specllama.models import header_cache
from specllama.models.header_cache import HeaderCache


def mtp_model(folder):
    return write_gguf(folder / "mtp.gguf", vocab(60), arch="qwen35",
                      extra={"qwen35.nextn_predict_layers": 1})  # fmt: skip


def test_the_mtp_layers_survive_the_cache(tmp_path):
    path, cache_file = mtp_model(tmp_path), tmp_path / "headers.json"
    cache = HeaderCache(cache_file)
    assert cache.header(path).n_nextn == 1
    cache.save()
    again = HeaderCache(cache_file)
    assert again.header(path).has_mtp and again.reads == 0


def test_a_cache_of_an_older_format_is_read_again(tmp_path):
    """A format-1 entry has no n_nextn: taken as it is, it would say "no MTP" for a model that
    has it."""
    path, cache_file = mtp_model(tmp_path), tmp_path / "headers.json"
    cache = HeaderCache(cache_file)
    cache.header(path)
    cache.save()
    data = json.loads(cache_file.read_text())
    for entry in data["entries"].values():
        del entry["header"]["n_nextn"]
    data["format"] = header_cache.FORMAT - 1
    cache_file.write_text(json.dumps(data))
    old = HeaderCache(cache_file)
    assert old.header(path).n_nextn == 1 and old.reads == 1


def test_an_entry_written_before_a_header_field_existed_is_read_again(tmp_path):
    """A field added to the header needs no new format: the entries without it are read
    again, the others kept."""
    path, cache_file = mtp_model(tmp_path), tmp_path / "headers.json"
    other = write_gguf(tmp_path / "other.gguf", vocab(60))
    cache = HeaderCache(cache_file)
    cache.header(path), cache.header(other)
    cache.save()
    data = json.loads(cache_file.read_text())
    del data["entries"][str(path.resolve())]["header"]["n_nextn"]
    cache_file.write_text(json.dumps(data))
    again = HeaderCache(cache_file)
    assert again.header(path).n_nextn == 1 and again.reads == 1
    assert again.header(other).n_nextn == 0 and again.reads == 1  # a whole entry is kept
