"""The tree is the architecture diagram (README "Architecture"): which room may import which, checked on the source.

A room is a top-level folder (a page's package under ``app_pages/`` is a room of its own). :data:`FLOORS` lists
every room with the rooms it may import; the imports only point down, so the graph of rooms has no cycle and a
reader finds each concept in one place:

* ``model/`` (the Transformer, its checkpoints and tokenizers) imports no other room; ``decoding/`` reads only the
  model; ``reading/`` (traces, attribution, analysis) reads the model and its decodings;
* ``viz/`` (what every picture shares, and the pictures of attention) and ``charts/`` (the other pictures) draw
  arrays and strings they are given: neither imports torch nor any room that computes, and ``charts/`` may import
  ``viz/``, never the reverse;
* ``training/`` (what a run is made of and leaves), ``evaluation/``, ``trainer/`` (the loop and its command line),
  ``launching/`` (runs started from the app) and ``tools/`` never import Streamlit, and the trainer process loads
  nothing of the app;
* ``serving/`` (the gate, batching, byte-bounded caches) and ``ui/`` (the shared glue) import no page; a page imports
  no other page;
* no room holds more than :data:`MAX_MODULES` modules, no source file more than :data:`MAX_LINES` lines, and the
  module graph has no cycle.

Imports are read with :mod:`ast` (top-level and inside functions alike), so the test needs no import of the
code it checks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = {"model", "decoding", "reading", "corpora"}
#: Every room and the rooms it may import (besides itself): the floors of the house, ground floor first.
FLOORS: dict[str, set[str]] = {
    "corpora": set(),
    "model": set(),
    "decoding": {"model"},
    "reading": {"model", "decoding"},
    "teaching": {"model", "reading"},
    "viz": set(),
    "charts": {"viz"},
    "training": CORE,
    "evaluation": CORE | {"training"},
    "trainer": CORE | {"training", "evaluation"},
    "launching": CORE | {"training"},
    "tools": CORE | {"training", "evaluation", "trainer"},
    "serving": {"model", "decoding"},
    "ui": CORE | {"training", "launching", "serving", "viz"},
    "reading_views": CORE | {"serving", "ui", "viz", "charts"},
    **{
        f"app_pages.{page}": CORE
        | {"teaching", "training", "launching", "serving", "ui", "reading_views", "viz", "charts"}
        for page in ("translate", "attention", "decoding", "positional", "tokenization", "lecture", "training")
    },
    "app_pages": set(),  # the package face of the pages
    "deploy": set(),
    "benchmarks": CORE | {"training", "evaluation", "trainer", "tools", "serving", "ui", "viz", "charts", "deploy"},
    "app": {"serving", "ui"},
}
PACKAGES = tuple(sorted({room.split(".")[0] for room in FLOORS} - {"app"}))
NO_STREAMLIT = (
    "model",
    "decoding",
    "reading",
    "training",
    "evaluation",
    "trainer",
    "launching",
    "tools",
    "corpora",
    "teaching",
    "viz",
    "charts",
    "deploy",
)
MAX_LINES = 400
#: Modules one room may hold (``__init__.py`` aside; ``benchmarks/``' flat scripts and ``tests/`` are no rooms)
MAX_MODULES = 12


def module_name(path: Path) -> str:
    """``trainer/loop.py`` → ``trainer.loop``; ``corpora/__init__.py`` → ``corpora``."""
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


def room_of(name: str) -> str:
    """``app_pages.attention.views`` → ``app_pages.attention``; ``model.hf.loader`` → ``model``."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "app_pages" and len(parts) > 1 else parts[0]


GRAPH = {module_name(f): imports_of(f) for f in source_files()}


@pytest.mark.parametrize("package", NO_STREAMLIT)
def test_core_packages_do_not_import_streamlit(package):
    offenders = sorted(m for m, deps in GRAPH.items() if top(m) == package and any(top(d) == "streamlit" for d in deps))
    assert not offenders, f"Streamlit imported in {offenders}: only app.py and the rooms of the pages may"


@pytest.mark.parametrize("room", ["viz", "charts"])
def test_the_drawing_rooms_draw_what_they_are_given(room):
    banned = ({"torch", "streamlit"} | set(PACKAGES)) - {room} - FLOORS[room]
    offenders = {m: sorted(d for d in deps if top(d) in banned) for m, deps in GRAPH.items() if top(m) == room}
    offenders = {m: d for m, d in offenders.items() if d}
    assert not offenders, f"{room}/ must not compute with the model: {offenders}"


def test_every_room_is_on_the_plan():
    rooms = {room_of(m) for m in GRAPH}
    assert rooms <= set(FLOORS), f"rooms missing from FLOORS: {sorted(rooms - set(FLOORS))}"


def test_rooms_import_only_the_rooms_below_them():
    """A room imports only what :data:`FLOORS` allows: the model imports nothing of ours, a page no other page,
    the shared glue no page."""
    offenders = {}
    for m, deps in GRAPH.items():
        here = room_of(m)
        wrong = sorted(
            d for d in deps if room_of(d) in FLOORS and room_of(d) != here and room_of(d) not in FLOORS[here]
        )
        if wrong:
            offenders[m] = wrong
    assert not offenders, f"imports that are not on the plan: {offenders}"


def test_the_plan_has_no_cycle():
    assert find_cycle({room: set(allowed) for room, allowed in FLOORS.items()}) is None


def test_the_plan_catches_a_page_importing_another():
    deps = {"app_pages.translate.page": {"app_pages.decoding.lab"}}
    wrong = [d for m, ds in deps.items() for d in ds if room_of(d) not in FLOORS[room_of(m)]]
    assert wrong == ["app_pages.decoding.lab"]


def test_no_room_holds_too_many_modules():
    counts: dict[str, int] = {}
    for f in source_files():
        if f.name != "__init__.py" and top(module_name(f)) != "benchmarks":
            folder = str(f.parent.relative_to(ROOT))
            counts[folder] = counts.get(folder, 0) + 1
    crowded = {folder: n for folder, n in counts.items() if n > MAX_MODULES}
    assert not crowded, f"rooms over {MAX_MODULES} modules: {crowded}"


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
                return path[path.index(nxt) :] + [nxt]
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
    """``python -m trainer.train`` runs as a process of its own: it must not load the Training page's launcher
    (``launching.launch``, ``launching.form``) or anything of the app, so that the app's code can change without
    touching a run that is training."""
    closure = import_closure("trainer.train")
    assert "trainer.loop" in closure and "training.state" in closure  # the walk follows the trainer's imports
    banned = [
        n
        for n in closure
        if n.startswith(("launching.launch", "launching.form")) or top(n) in {"ui", "app_pages", "streamlit", "app"}
    ]
    assert not banned, f"the trainer process imports the app: {sorted(banned)}"


def test_the_container_image_copies_every_room_the_app_imports():
    """``deploy/Dockerfile`` copies the rooms one by one: a room added to the house and missing there gave an image
    whose app failed at its first import. The app is ``app.py``, the page scripts it navigates to (by path, not by
    import), the serving front, and the trainer the Training page starts as a process (by command)."""
    starts = [
        "app",
        "deploy.serve",
        "deploy.worker",
        "trainer.train",
        *(m for m in GRAPH if m.startswith("app_pages.")),
    ]
    needed = {top(n) for start in starts for n in {start, *import_closure(start)}} & set(PACKAGES)
    copied = set(re.findall(r"^COPY (\w+)/ \1/$", (ROOT / "deploy" / "Dockerfile").read_text(), re.MULTILINE))
    assert "model" in needed and "serving" in needed  # the walk follows the app's imports
    assert not needed - copied, f"deploy/Dockerfile copies no {sorted(needed - copied)}"
    # the build context sends only what its allow-list names (BuildKit reads it beside the Dockerfile)
    sent = set(re.findall(r"^!(\w+)/$", (ROOT / "deploy" / "Dockerfile.dockerignore").read_text(), re.MULTILINE))
    assert not needed - sent, f"deploy/Dockerfile.dockerignore keeps {sorted(needed - sent)} out of the build"
