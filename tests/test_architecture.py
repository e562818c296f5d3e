"""The tree is the architecture diagram (README "Architecture"): who may import whom, checked on the source.

* ``model/``, ``training/``, ``corpora/``, ``teaching/``, ``reading/`` and ``viz/`` never import Streamlit (only
  ``app.py``, ``app_pages/`` and ``ui/`` are Streamlit glue);
* ``viz/`` draws arrays and strings it is given: it imports neither torch nor ``model/``, ``reading/``,
  ``training/``, ``corpora/`` or ``ui/``;
* ``model/`` is the pure core: it imports none of ``training/``, ``corpora/``, ``teaching/``, ``reading/``, ``viz/``,
  ``ui/``;
* ``reading/`` (attribution, faithfulness) reads the model: it imports ``model/``, never Streamlit, ``ui/``,
  ``app_pages/``, ``viz/``, ``training/`` or ``corpora/``; ``viz/`` draws its arrays without importing it;
* the import graph between the project's modules has no cycle;
* no source file is over ``MAX_LINES`` lines.

Imports are read with :mod:`ast` (top-level and inside functions alike), so the test needs no import of the
code it checks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("model", "training", "corpora", "teaching", "reading", "viz", "ui", "app_pages", "benchmarks", "deploy")
NO_STREAMLIT = ("model", "training", "corpora", "teaching", "reading", "viz", "deploy")
MAX_LINES = 400


def module_name(path: Path) -> str:
    """``training/loop.py`` → ``training.loop``; ``corpora/__init__.py`` → ``corpora``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files() -> list[Path]:
    files = [ROOT / "app.py"]
    for package in PACKAGES:
        files += sorted((ROOT / package).rglob("*.py"))
    return [f for f in files if f.is_file()]


def imports_of(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (``from . import x`` resolved against its package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                base_name = ".".join(base)
                target = f"{base_name}.{node.module}" if node.module else base_name
            else:
                target = node.module or ""
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return names


def top(name: str) -> str:
    return name.split(".")[0]


GRAPH = {module_name(f): imports_of(f) for f in source_files()}


@pytest.mark.parametrize("package", NO_STREAMLIT)
def test_core_packages_do_not_import_streamlit(package):
    offenders = sorted(m for m, deps in GRAPH.items() if top(m) == package and any(top(d) == "streamlit" for d in deps))
    assert not offenders, f"Streamlit imported in {offenders}: only app.py, app_pages/ and ui/ may"


def test_viz_draws_what_it_is_given():
    banned = {"torch", "model", "reading", "training", "corpora", "ui", "app_pages", "streamlit"}
    offenders = {m: sorted(d for d in deps if top(d) in banned) for m, deps in GRAPH.items() if top(m) == "viz"}
    offenders = {m: d for m, d in offenders.items() if d}
    assert not offenders, f"viz/ must not compute with the model: {offenders}"


def test_model_is_the_pure_core():
    banned = {"training", "corpora", "teaching", "reading", "viz", "ui", "app_pages", "streamlit"}
    offenders = {m: sorted(d for d in deps if top(d) in banned) for m, deps in GRAPH.items() if top(m) == "model"}
    offenders = {m: d for m, d in offenders.items() if d}
    assert not offenders, f"model/ imports outer layers: {offenders}"


def test_reading_reads_the_model_and_nothing_above_it():
    banned = {"training", "corpora", "viz", "ui", "app_pages", "streamlit"}
    modules = {m: deps for m, deps in GRAPH.items() if top(m) == "reading"}
    assert "reading.attribution" in modules and any(top(d) == "model" for d in modules["reading.attribution"])
    offenders = {m: sorted(d for d in deps if top(d) in banned) for m, deps in modules.items()}
    offenders = {m: d for m, d in offenders.items() if d}
    assert not offenders, f"reading/ imports layers above it: {offenders}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the module graph as ``[a, b, …, a]``, or ``None``. Edges go only to modules of ``graph``."""
    edges = {m: sorted(d for d in deps if d in graph and d != m) for m, deps in graph.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_find_cycle_sees_a_cycle_and_a_clean_graph():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "os"}, "b": {"c"}, "c": set()}) is None


def test_the_import_graph_has_no_cycle():
    # A package's __init__ is an edge target only when imported by that name; `from pkg import mod` adds pkg.mod.
    assert find_cycle(GRAPH) is None, f"import cycle: {' → '.join(find_cycle(GRAPH))}"


def test_no_source_file_is_too_long():
    long = {str(f.relative_to(ROOT)): n for f in source_files() if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines: {long}"


def import_closure(start: str) -> set[str]:
    """Every name ``start`` imports, directly or through the project's modules it imports (those of ``GRAPH``)."""
    seen, todo = set(), [start]
    while todo:
        for name in GRAPH.get(todo.pop(), ()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def test_the_trainer_process_imports_nothing_of_the_app():
    """``python -m training.train`` runs as a process of its own: it must not load the Training page's launcher
    (``training.launch``, ``training.form``) or anything of the app, so that the app's code can change without
    touching a run that is training."""
    closure = import_closure("training.train")
    assert "training.loop" in closure and "training.state" in closure  # the walk follows the trainer's imports
    banned = [n for n in closure if n.startswith(("training.launch", "training.form"))
              or top(n) in {"ui", "app_pages", "streamlit", "app"}]
    assert not banned, f"the trainer process imports the app: {sorted(banned)}"
