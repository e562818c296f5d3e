"""Every session-state key and link parameter the pages use is declared once, in ``ui/page_state.py``.

The source of the app (``app.py``, ``app_pages/``, ``reading_views/``, ``ui/``, ``serving/``) is read as Python (AST):
every string used as a key of ``st.session_state`` (subscript, ``get``/``pop``/``setdefault``, ``in``), as a widget's or
element's ``key=``, or given to ``url.init_widget``, and every link parameter read (``url.*_param(params, NAME, …)``,
``st.query_params``) or written (``url.put``/``put_text``), must belong to a declared field. Keys built per index
(``f"hm_{kind}"``) must start with a declared family's stem. Keys held in names (``TRANSLATE.step.key``) come from the
declarations themselves; the AppTest runs below check those at run time: every key in a page's session after a visit is
declared.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from ui import page_state as P

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [
    ROOT / "app.py",
    *(f for room in ("app_pages", "reading_views", "ui", "serving") for f in sorted((ROOT / room).rglob("*.py"))),
]
SESSION_NAMES = {"session_state", "ss"}
#: Names that stand for ``st.query_params`` in the source.
PARAM_NAMES = {"query_params"}
#: Imported constants that key strings are built from.
CONSTANTS = {"STEP_BUTTONS": P.STEP_BUTTONS}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` (and ``A, B = "a", "b"``) assignments."""
    found = dict(CONSTANTS)
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        both = isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
        pairs = zip(target.elts, value.elts, strict=False) if both else [(target, value)]
        for t, v in pairs:
            if isinstance(t, ast.Name) and isinstance(v, ast.Constant) and isinstance(v.value, str):
                found[t.id] = v.value
    return found


def _literal(node: ast.AST, consts: dict[str, str]) -> tuple[str, bool] | None:
    """``(text, exact)`` of a string the code spells out: a literal, a module constant, or an f-string's fixed
    start (``exact`` False: the key is built per index). ``None``: the string comes from elsewhere."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id], True
    if isinstance(node, ast.JoinedStr):
        start = ""
        for part in node.values:
            if isinstance(part, ast.Constant):
                start += str(part.value)
            elif isinstance(part.value, ast.Name) and part.value.id in consts:
                start += consts[part.value.id]
            else:
                return start, False
        return start, True
    return None


def uses(path: Path) -> tuple[list[tuple[str, bool, int]], list[tuple[str, int]]]:
    """The session keys ``(text, exact, line)`` and link parameters ``(name, line)`` that ``path`` spells out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    consts = _constants(tree)
    keys: list[tuple[str, bool, int]] = []
    params: list[tuple[str, int]] = []

    def key(node: ast.AST) -> None:
        if (found := _literal(node, consts)) is not None:
            keys.append((*found, node.lineno))

    def param(node: ast.AST) -> None:
        if (found := _literal(node, consts)) is not None:
            params.append((found[0], node.lineno))

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            if _name(node.value) in SESSION_NAMES:
                key(node.slice)
            elif _name(node.value) in PARAM_NAMES:
                param(node.slice)
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            where = _name(node.comparators[0])
            if where in SESSION_NAMES:
                key(node.left)
            elif where in PARAM_NAMES:
                param(node.left)
        elif isinstance(node, ast.Call):
            fn = node.func
            for kw in node.keywords:
                if kw.arg == "key":
                    key(kw.value)
            if not isinstance(fn, ast.Attribute) or not node.args:
                continue
            owner = _name(fn.value)
            if fn.attr in ("get", "pop", "setdefault", "get_all") and owner in SESSION_NAMES:
                key(node.args[0])
            elif fn.attr in ("get", "pop", "get_all") and owner in PARAM_NAMES:
                param(node.args[0])
            elif (owner == "url" and fn.attr == "init_widget") or fn.attr == "form":  # st.form(key)
                key(node.args[0])
            elif owner == "url" and fn.attr.endswith("_param") and len(node.args) >= 2:
                param(node.args[1])
            elif owner == "url" and fn.attr in ("put", "put_text"):
                param(node.args[0])
    return keys, params


DECLARED = P.declared()
DECLARED_PARAMS = {name for f in DECLARED for name in f.link_params()}


def _declares(text: str, exact: bool) -> P.Field | None:
    if exact:
        return P.owner(text)
    if text == P.STEP_BUTTONS:  # the step buttons' container of a step key that the caller passes (checked at run time)
        return P.TRANSLATE.step
    # a key built per index: its fixed start must lie within a family's stem and the part after it
    return next((f for f in DECLARED if f.family and (text.startswith(f.key + "_") or text == f.key + "_")), None)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_key_and_parameter_the_code_spells_out_is_declared(path):
    keys, params = uses(path)
    undeclared = [
        f"line {line}: key {text!r}{'' if exact else '…'}"
        for text, exact, line in keys
        if _declares(text, exact) is None
    ]
    undeclared += [f"line {line}: link parameter {name!r}" for name, line in params if name not in DECLARED_PARAMS]
    assert not undeclared, "not declared in ui/page_state.py: " + "; ".join(undeclared)


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The scan itself: a page that reads an undeclared key or parameter is caught (else the test above passes by
    finding nothing)."""
    page = tmp_path / "page.py"
    page.write_text(
        'import streamlit as st\nfrom ui import url\nst.session_state["zz_new"] = 1\n'
        'st.selectbox("x", [1], key=f"zz_{1}")\nurl.int_param(st.query_params, "zz_param", 0, 0, 1)\n'
        'if "zz_in" in st.query_params:\n    pass\nst.session_state.get("tr_step")\n'
    )
    keys, params = uses(page)
    assert [(t, e) for t, e, _ in keys] == [("zz_new", True), ("zz_", False), ("tr_step", True)]
    assert sorted(n for n, _ in params) == ["zz_in", "zz_param"]
    assert _declares("zz_new", True) is None and _declares("tr_step", True) is P.TRANSLATE.step


def test_each_key_is_declared_once_with_its_pages_one_prefix():
    keys = [f.key for f in DECLARED]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    prefixes = [page.prefix for page in P.PAGES]
    assert len(set(prefixes)) == len(prefixes)
    for page in P.PAGES:
        assert all(f.key.startswith(page.prefix) for f in page.fields()), page.page
    # no family's keys can be taken for another field's (a stem inside another stem is a longer, separate field)
    for f in DECLARED:
        assert P.owner(f.key) is f, f.key


def test_every_declared_field_is_used():
    """A declared key its page no longer uses would silently reset nothing when a checkpoint or sentence changes:
    each field is spelled out in the code (``"tr_layer"``, ``f"tn_form_{…}"``) or named through its page's record
    (``TRANSLATE.lens``)."""
    code = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES if p.name != "page_state.py")
    records = {id(v): name for name, v in vars(P).items() if isinstance(v, P.PageState)}
    unused = []
    for page in P.PAGES:
        for f in dataclasses.fields(page):
            field = getattr(page, f.name)
            if (
                isinstance(field, P.Field)
                and f'"{field.key}' not in code
                and f"{records[id(page)]}.{f.name}" not in code
            ):
                unused.append(field.key)
    assert not unused, unused


def test_the_app_keeps_at_most_sixty_session_keys():
    """Each field is one key, or one family of keys derived from it; elements (containers, charts) hold no state."""
    state = [f for f in DECLARED if not f.element]
    assert len(state) <= 60, len(state)


def test_each_link_parameter_means_one_thing_on_a_page():
    """Within a page a link parameter feeds one field (across pages ``layer`` is each page's own layer)."""
    for page in P.PAGES:
        names = [n for f in page.fields() for n in f.link_params()]
        assert len(names) == len(set(names)), (page.page, sorted(n for n in names if names.count(n) > 1))


def test_an_event_forgets_what_is_declared_to_go_with_it():
    session = {
        "tr_step": 3,
        "tr_layer": 1,
        "tr_attr_layer": 2,
        "tr_attr_word": 0,
        "tr_attr_method": "ig",
        "at_sweep_for": ("x",),
        "dl_w_beam": 4,
        "dl_w_seed": 3,
        "app_text": "A dog.",
    }
    params = {
        "step": "3",
        "layer": "2",
        "attr_layer": "2",
        "whatif_word": "1",
        "sweep": "1",
        "beam": "4",
        "seed": "3",
        "text": "A dog.",
    }
    P.forget("model", session, params)
    assert set(session) == {"tr_step", "tr_attr_word", "tr_attr_method", "at_sweep_for", "dl_w_seed", "app_text"}
    # the beam's width is read from the link again for the next model: its default may be that model's own
    assert set(params) == {"step", "whatif_word", "sweep", "beam", "seed", "text"}
    P.forget("sentence", session, params)
    assert set(session) == {"tr_attr_method", "dl_w_seed", "app_text"} and set(params) == {"beam", "seed", "text"}


# --- at run time: what a visit leaves in the session ----------------------------------------------------------
needs_ckpt = pytest.mark.skipif(
    not (ROOT / "checkpoints" / "en-de" / "model.safetensors").exists(), reason="needs the shipped checkpoint"
)
#: Keys Streamlit or the test harness keep in every session (not the app's).
NOT_THE_APPS = ("$$",)


def session_keys(at) -> list[str]:
    state = at.session_state._state  # the SafeSessionState behind AppTest's view
    return [k for k in state.filtered_state if not k.startswith(NOT_THE_APPS)]


@needs_ckpt
@pytest.mark.parametrize(
    "page, query",
    [
        ("translate", {"step": "2", "lens": "1", "attr": "1"}),
        ("attention", {"tab": "Tokens & lines"}),
        ("decoding", {"step": "2"}),
        ("positional", {}),
        ("tokenization", {}),
        ("lecture", {"numbers": "live"}),
        ("training", {}),
    ],
)
def test_a_visit_keeps_only_declared_keys(page, query):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for name, value in query.items():
        at.query_params[name] = value
    at.run()
    if page != "translate":
        at.switch_page(f"app_pages/{page}/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    # a form's submit button is kept under "FormSubmitter:<the form's key>-<its label>"
    keys = [
        k.removeprefix("FormSubmitter:").rsplit("-", 1)[0] if k.startswith("FormSubmitter:") else k
        for k in session_keys(at)
    ]
    undeclared = [k for k in keys if P.owner(k) is None]
    assert not undeclared, undeclared
