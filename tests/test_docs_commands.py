"""The commands and snippets the docs give a reader still name our code as it is: every ``python -m X`` of ours in
``README.md``, ``docs/*.md`` and the model cards and their histories is a module that exists, and every ``from X
import a, b`` in their Python blocks imports names that exist. A module moved or renamed otherwise leaves the docs
pointing at nothing, and nothing else runs them."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted(p for p in (ROOT / "checkpoints").glob("*/*.md") if (p.parent / "card.json").is_file()),
]
#: Our top-level packages: a command or import of anything else (streamlit, torch) is not ours to check.
OURS = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
_MODULE = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_the_pages_and_packages_are_found():
    """Guards the two tests below against passing on nothing."""
    assert len(PAGES) >= 5 and {"model", "training", "corpora", "benchmarks"} <= OURS


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_m_names_a_module_of_ours_that_exists(page):
    names = {m for m in _MODULE.findall(page.read_text(encoding="utf-8")) if m.split(".")[0] in OURS}
    missing = sorted(m for m in names if importlib.util.find_spec(m) is None)
    assert not missing, f"{page.relative_to(ROOT)} runs modules that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_import_in_a_python_block_resolves(page):
    wrong = []
    for block in _PYTHON_BLOCK.findall(page.read_text(encoding="utf-8")):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
                module = importlib.import_module(node.module)
                wrong += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)]
    assert not wrong, f"{page.relative_to(ROOT)} imports names that do not exist: {wrong}"
