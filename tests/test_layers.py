"""The house rules of the package layout (README, "Layout"), checked on the source."""

from __future__ import annotations

import import_graph

FOLDERS = ("family", "llama", "engine", "policy", "models", "session", "server", "cli", "bench")


def test_every_module_belongs_to_a_part() -> None:
    folders = {p.name for p in import_graph.PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(FOLDERS)
    top = {p.stem for p in import_graph.PACKAGE.glob("*.py")}
    assert top == {
        "__init__",
        "__main__",
        "chat",
        "chat_template",
        "errors",
        "paths",
        "memory_store",
        "tool_calls",
        "json_text",
        "schemas",
    }


def test_each_part_says_what_it_is_and_may_import() -> None:
    for folder in FOLDERS:
        doc = (import_graph.PACKAGE / folder / "__init__.py").read_text(encoding="utf-8")
        assert doc.startswith('"""') and "May import" in doc, folder


def test_no_import_circles() -> None:
    assert import_graph.circles() == []


def test_imports_go_down_the_layers_only() -> None:
    assert import_graph.upward_imports() == []


def test_engine_policy_and_models_never_print_through_a_face() -> None:
    assert import_graph.face_libraries_in_quiet_parts() == []


def test_only_the_llama_part_imports_llama_cpp() -> None:
    assert import_graph.llama_cpp_outside_llama() == []


def test_the_checker_sees_a_circle_and_an_upward_import(monkeypatch) -> None:
    """The checks can fail: a made-up graph with engine importing the policy back."""
    fake = {
        "specllama.engine.speculative": frozenset({"specllama.policy.controller"}),
        "specllama.policy.controller": frozenset({"specllama.engine.speculative"}),
    }
    import_graph.graph.cache_clear()
    monkeypatch.setattr(import_graph, "graph", lambda: fake)
    assert import_graph.circles() == [sorted(fake)]
    assert import_graph.upward_imports() == [
        "specllama.engine.speculative -> specllama.policy.controller (engine -> policy)"
    ]
