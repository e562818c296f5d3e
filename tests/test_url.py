"""The URL query parameters (``ui/url.py``): the typed readers on bad values, and every page fed bad values for
every one of its parameters with Streamlit's AppTest (a note in the page, never a traceback)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ui import url

ROOT = Path(__file__).resolve().parent.parent
BAD_NUMBERS = ["-1", "-99999", "99999999999", "1e400", "nan", "inf", "-inf", "abc", "", "0x10", "1:2", "9" * 5000]


# --- the readers -------------------------------------------------------------------------------------------------
def test_a_missing_parameter_gives_the_default_without_a_note():
    for read in (
        lambda p: url.int_param(p, "n", 3, 0, 9),
        lambda p: url.float_param(p, "x", 0.5, 0.0, 1.0),
        lambda p: url.choice_param(p, "c", ["a", "b"], "a"),
        lambda p: url.bool_param(p, "b", True),
        lambda p: url.text_param(p, "t", "hi", 10),
        lambda p: url.int_list_param(p, "l", [1], 0, 9),
        lambda p: url.choices_param(p, "s", ["a", "b"], ["b"]),
        lambda p: url.head_param(p, "h", 4, "all"),
        lambda p: url.index_param(p, "i", 3, 2),
        lambda p: url.forced_param(p, "f", 10, 10),
    ):
        value, note = read({})
        assert note is None
    assert url.matrix_param({}, "m", np.eye(2))[1] is None


@pytest.mark.parametrize("raw", BAD_NUMBERS + ["1.5"])
def test_int_param_clamps_or_ignores_with_a_note(raw):
    value, note = url.int_param({"step": raw}, "step", 2, 0, 10)
    assert isinstance(value, int) and 0 <= value <= 10
    assert note and "`step`" in note and "from the link" in note
    if raw in ("-1", "-99999"):
        assert value == 0 and "outside 0–10" in note
    elif raw == "99999999999":
        assert value == 10
    else:
        assert value == 2  # not a whole number: the default


def test_int_param_accepts_whole_numbers_and_spaces():
    assert url.int_param({"n": " 7 "}, "n", 0, 0, 9) == (7, None)
    assert url.int_param({"n": "7.0"}, "n", 0, 0, 9) == (7, None)
    assert url.int_param({"n": ["1", "4"]}, "n", 0, 0, 9) == (4, None)  # a repeated parameter: the last
    assert url.int_param({"n": "9" * 400}, "n", 0, 0, 9)[0] == 9  # a huge digit string is clamped, not an error


@pytest.mark.parametrize("raw", BAD_NUMBERS)
def test_float_param_never_gives_nan_or_out_of_range(raw):
    value, note = url.float_param({"temperature": raw}, "temperature", 1.0, 0.05, 2.0)
    assert math.isfinite(value) and 0.05 <= value <= 2.0 and note and "`temperature`" in note


@pytest.mark.parametrize("raw", ["nucleus", "", "-1", "nan", "ALL HEADS"])
def test_choice_param_ignores_unknown_choices(raw):
    value, note = url.choice_param(
        {"kind": raw}, "kind", ["encoder", "decoder", "cross"], "cross", what="attention kind"
    )
    assert value == "cross" and "`kind` (attention kind)" in note and "encoder, decoder, cross" in note
    assert url.choice_param({"kind": "DECODER"}, "kind", ["encoder", "decoder"], "encoder") == ("decoder", None)
    assert url.choice_param({"heads": "4"}, "heads", {"1": 1, "2": 2, "4": 4}, 2) == (4, None)


def test_head_and_index_params_count_from_one():
    assert url.head_param({"head": "1"}, "head", 4, "all") == (0, None)
    assert url.head_param({"head": "mean"}, "head", 4, "all") == ("mean", None)
    assert url.head_param({"head": "all"}, "head", 4, "mean", ("mean",))[0] == "mean"  # no "all" on this page
    for raw in ("0", "5", "-1", "nan", "x"):
        value, note = url.head_param({"head": raw}, "head", 4, "all")
        assert value == "all" and note
        assert url.head_param({"head": url.format_head(3)}, "head", 4, "all") == (3, None)
    assert url.index_param({"layer": "3"}, "layer", 3, 0) == (2, None)
    assert url.index_param({"layer": "0"}, "layer", 3, 2)[0] == 0  # clamped into 1…3, i.e. the first
    assert url.index_param({"layer": "99"}, "layer", 3, 0)[0] == 2


@pytest.mark.parametrize("raw, expected", [("1", True), ("true", True), ("ON", True), ("0", False), ("no", False)])
def test_bool_param(raw, expected):
    assert url.bool_param({"words": raw}, "words", not expected) == (expected, None)


@pytest.mark.parametrize("raw", ["2", "-1", "nan", "maybe", ""])
def test_bool_param_ignores_garbage(raw):
    value, note = url.bool_param({"words": raw}, "words", False)
    assert value is False and "`words`" in note


def test_text_param_caps_the_length():
    assert url.text_param({"text": ""}, "text", "preset", 10) == ("", None)  # the page says the text is empty
    value, note = url.text_param({"text": "x" * 25}, "text", "preset", 10)
    assert value == "x" * 10 and "25 characters" in note


def test_list_params_drop_bad_entries():
    assert url.int_list_param({"dims": "4,0,x,-1,99,4"}, "dims", [], 0, 63)[0] == [0, 4]
    assert url.int_list_param({"dims": ""}, "dims", [1], 0, 9) == ([], None)
    assert "x" in url.int_list_param({"dims": "x"}, "dims", [], 0, 9)[1]
    picked, note = url.choices_param(
        {"ablate": "cross L1 H2,bogus,encoder L1 H1"}, "ablate", ["encoder L1 H1", "cross L1 H2"]
    )
    assert picked == ["encoder L1 H1", "cross L1 H2"] and "bogus" in note


def test_forced_and_matrix_params():
    assert url.forced_param({"forced": "3:12,5:88"}, "forced", 100, 50) == ({3: 12, 5: 88}, None)
    forced, note = url.forced_param({"forced": "zz,0:1,4:100,6:-1,7:5"}, "forced", 100, 50)
    assert forced == {7: 5} and "zz" in note
    assert url.format_forced({5: 88, 3: 12}) == "3:12,5:88"
    m = np.array([[1.0, -0.5], [0.25, 2.0]])
    assert np.array_equal(url.matrix_param({"q": url.format_matrix(m)}, "q", np.eye(2))[0], m)
    for raw in ("1,2;3", "1,2;3,nan", "a,b;c,d", "1,2,3,4", "1e400,0;0,1", "-1"):
        value, note = url.matrix_param({"q": raw}, "q", np.eye(2))
        assert np.array_equal(value, np.eye(2)) and "`q`" in note


# --- every page, every parameter, bad values (AppTest) -------------------------------------------------------------
pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

needs_ckpt = pytest.mark.skipif(
    not (ROOT / "checkpoints" / "en-de" / "model.safetensors").is_file(), reason="checkpoints/en-de is missing"
)

#: (page, parameters set to a valid value so that the page draws the controls under test, parameters under test)
PAGE_PARAMS = [
    ("translate", {}, ["step", "ckpt"]),
    ("translate", {}, ["layer", "head"]),  # read at step 0 already, though drawn from step 1 on
    ("translate", {"step": "1"}, ["attr"]),
    ("translate", {"step": "1", "attr": "1"}, ["attr_method", "attr_layer", "attr_head", "attr_steps"]),
    ("attention", {"tab": "Tokens & lines"}, ["kind", "layer", "head", "words", "query", "key", "threshold", "focus"]),
    ("attention", {}, ["tab"]),
    ("attention", {"tab": "Model grid"}, ["grid"]),
    ("attention", {"tab": "Head statistics"}, ["stat"]),
    ("attention", {"tab": "Ablation"}, ["ablate", "sweep"]),
    ("attention", {"tab": "Compare"}, ["compare"]),
    ("attention", {"tab": "Compare", "compare": "checkpoint"}, ["compare_ckpt"]),
    ("decoding", {}, ["strategy", "temperature", "top_k", "top_p", "seed", "beam", "alpha", "step", "forced"]),
    ("positional", {}, ["d_model", "length", "offset", "dims"]),
    ("tokenization", {}, ["word", "vocab"]),
    ("lecture", {}, ["scaled", "causal", "heads", "seed", "q", "k", "v", "x", "gamma", "beta"]),
]
#: Bad for each parameter above (unless FINE): below, above, not a number ("abc" and the like: the readers' tests).
BAD_VALUES = ["-1", "99999999999", "nan"]
FINE = {("offset", "-1")}  # the linear map's offset k may be negative


def open_page(page: str, query: dict[str, str]) -> AppTest:
    """A fresh session opened on ``/page?query`` (the page's first run reads the link, as in a browser)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page(f"app_pages/{page}/{page}.py")
    return at.run()


def notes_of(at: AppTest) -> str:
    shown = [*at.info, *at.warning, *at.caption, *at.sidebar.warning]
    return "\n".join(str(e.value) for e in shown)


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_CHECKPOINTS", raising=False)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)


@needs_ckpt
@pytest.mark.parametrize("bad", BAD_VALUES)
@pytest.mark.parametrize("page, valid, names", PAGE_PARAMS, ids=[f"{p}-{n[0]}" for p, _, n in PAGE_PARAMS])
def test_every_page_notes_bad_parameters_and_never_raises(page, valid, names, bad):
    at = open_page(page, {**valid, **{name: bad for name in names}})
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    notes = notes_of(at)
    for name in names:
        if (name, bad) not in FINE:
            assert f"`{name}`" in notes, (name, bad, notes)


@needs_ckpt
@pytest.mark.parametrize(
    "query, written", [({}, {}), ({"ckpt": "brown-lm"}, {"ckpt": "brown-lm"})], ids=["translator", "language-model"]
)
def test_a_visit_without_parameters_writes_no_default_into_the_link(query, written):
    """Visiting ``/`` wrote the default sentence into the link (``?text=Bobby+likes+blackberries.``): defaults are
    left out, so a link says only what differs from a fresh visit. Typing the default back takes it out again."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert dict(at.query_params) == written
    default = at.text_input(key="tr_text").value
    at.text_input(key="tr_text").input("The cat sat on the mat.").run()
    assert at.query_params["text"] == "The cat sat on the mat."
    at.text_input(key="tr_text").input(default).run()
    assert dict(at.query_params) == written
    again = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    for key, value in written.items():
        again.query_params[key] = value
    assert again.run().text_input(key="tr_text").value == default  # the link still shows the same sentence


@needs_ckpt
def test_worked_examples_with_seed_minus_one():
    """``/lecture?seed=-1`` raised ``ValueError: expected non-negative integer`` from NumPy."""
    at = open_page("lecture", {"seed": "-1"})
    assert not at.exception, [e.value for e in at.exception]
    assert "`seed` = -1 from the link is outside" in notes_of(at)
    assert any("(seed 0)" in c.value for c in at.caption)


@needs_ckpt
@pytest.mark.parametrize(
    "page, name, cap",
    [
        ("translate", "text", 2000),
        ("attention", "text", 2000),
        ("tokenization", "tok_text", 2000),
        ("tokenization", "train_text", 20000),
        ("attention", "compare_text", 2000),
    ],
)
def test_over_long_texts_in_the_link_are_cut_with_a_note(page, name, cap):
    query = {name: "word " * (cap // 5 + 100)}
    if name == "compare_text":
        query["tab"] = "Compare"
    at = open_page(page, query)
    assert not at.exception, [e.value for e in at.exception]
    assert f"only the first {cap:,} are used" in notes_of(at)


#: page → (the link it opens with, then each control set in turn: (widget kind, key, value)).
CONTROLS = {
    "translate": (
        {"text": "The cat sat on the mat.", "step": "2"},
        [("selectbox", "tr_layer", 0), ("selectbox", "tr_head", 1)],
    ),
    "translate-attribution": (
        {"text": "The cat sat on the mat.", "step": "2", "attr": "1"},
        [
            ("selectbox", "tr_attr_method", "attention"),
            ("selectbox", "tr_attr_layer", 1),
            ("selectbox", "tr_attr_head", 2),
            ("selectbox", "tr_attr_steps", 64),
        ],
    ),
    "attention-tokens": (
        {"tab": "Tokens & lines"},
        [
            ("radio", "at_kind", "encoder"),
            ("selectbox", "at_layer", 0),
            ("selectbox", "at_head", 2),
            ("toggle", "at_words", True),
            ("selectbox", "at_token_query", 2),
            ("selectbox", "at_token_key", 1),
            ("slider", "at_token_threshold", 0.2),
            ("toggle", "at_token_focus", True),
        ],
    ),
    "attention-grid": ({"tab": "Model grid"}, [("radio", "at_grid_style", "Altair (click a head to open it)")]),
    "attention-stats": ({"tab": "Head statistics"}, [("selectbox", "at_stat", "max")]),
    "attention-ablation": ({"tab": "Ablation"}, [("multiselect", "at_ablate", ["encoder L2 H3", "cross L1 H1"])]),
    "attention-compare": ({"tab": "Compare"}, [("text_input", "at_cmp_text", "Time flies like an arrow.")]),
    "attention-compare-checkpoint": (
        {"tab": "Compare"},
        [("radio", "at_cmp_mode", "another checkpoint"), ("selectbox", "at_cmp_ckpt", "runs/r1/best")],
    ),
    "decoding": (
        {"step": "3"},
        [
            ("radio", "dl_w_strategy", "sample"),
            ("slider", "dl_w_temperature", 0.7),
            ("number_input", "dl_w_top_k", 40),
            ("slider", "dl_w_top_p", 0.9),
            ("number_input", "dl_w_seed", 3),
        ],
    ),
    "decoding-beam": (
        {},
        [("radio", "dl_w_strategy", "beam"), ("slider", "dl_w_beam", 3), ("slider", "dl_w_alpha", 1.0)],
    ),
    "positional": (
        {},
        [
            ("number_input", "pe_d_model", 32),
            ("number_input", "pe_length", 20),
            ("number_input", "pe_offset", -3),
            ("multiselect", "pe_dims", [0, 2, 7]),
        ],
    ),
    "tokenization": (
        {},
        [
            ("text_area", "tk_text", "Hello there, general Kenobi."),
            ("selectbox", "tk_word", 1),
            ("text_area", "tk_train_text", "a cat\na hat\na bat"),
            ("slider", "tk_vocab", 50),
        ],
    ),
    "lecture": ({}, [("checkbox", "we_scale", False), ("checkbox", "we_causal", True), ("radio", "we_heads", 4)]),
}


@needs_ckpt
@pytest.mark.parametrize("case", list(CONTROLS))
def test_every_control_is_in_the_link_and_a_fresh_session_restores_it(case, tmp_path, monkeypatch):
    """Set each control, then open the page's link in a fresh session: every control shows the same value."""
    if case == "attention-compare-checkpoint":  # a run's best/ of the translator's architecture, to compare with
        best = tmp_path / "runs" / "r1" / "best"
        best.mkdir(parents=True)
        for f in (ROOT / "checkpoints" / "en-de").iterdir():
            (best / f.name).symlink_to(f)
        monkeypatch.setenv("ATTENTION_EXPLORER_RUNS", str(tmp_path / "runs"))
    page = case.split("-")[0]
    query, controls = CONTROLS[case]
    at = open_page(page, query)
    for kind, key, value in controls:
        getattr(at, kind)(key=key).set_value(value)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
    link = {k: at.query_params[k] for k in at.query_params}
    again = open_page(page, link)
    assert not again.exception, [e.value for e in again.exception]
    for kind, key, value in controls:
        assert getattr(again, kind)(key=key).value == value, (key, link)
    assert {k: again.query_params[k] for k in again.query_params} == link


@needs_ckpt
@pytest.mark.parametrize(
    "page", ["translate", "attention", "decoding", "positional", "tokenization", "lecture", "training"]
)
def test_a_first_visit_of_any_page_writes_no_default_into_the_link(page):
    """The Attention page wrote its defaults into the link on a first visit (``?kind=cross&layer=6&head=all``):
    a link says only what differs from a fresh visit, on every page."""
    at = open_page(page, {})
    assert not at.exception, [e.value for e in at.exception]
    assert dict(at.query_params) == {}


@needs_ckpt
def test_switching_back_to_the_default_checkpoint_takes_it_out_of_the_link():
    """Switching to brown-lm and back wrote ``?ckpt=en-de``, a parameter equal to its default."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90).run()
    at.sidebar.selectbox(key="app_ckpt").select("brown-lm").run()
    assert at.query_params["ckpt"] == "brown-lm"
    at.sidebar.selectbox(key="app_ckpt").select("en-de").run()
    assert not at.exception and "ckpt" not in at.query_params


@needs_ckpt
def test_a_new_sentence_takes_an_old_sweep_out_of_the_link():
    """``?sweep=1`` stayed in the link after the sentence changed, so opening that link started a sweep of a
    sentence nobody had asked to sweep."""
    at = open_page("attention", {"tab": "Ablation", "sweep": "1", "text": "The cat sat on the mat."})
    assert not at.exception and at.query_params.get("sweep") == "1"
    at.switch_page("app_pages/translate/translate.py").run()
    at.text_input(key="tr_text").input("A dog runs through the snow.").run()
    assert not at.exception and "sweep" not in at.query_params and "step" not in at.query_params


# --- hostile links: what a hostile or broken link carries, every parameter of a page at once --------------------
from benchmarks.chaos_visitors import PAGE_PARAMS, UNKNOWN_NAMES, hostile_query

SCRIPT = "<script>alert(1)</script>"
#: Each run sets every parameter of the page (the list the chaos benchmark sends) and a few unknown names to one.
HOSTILE = {"script": SCRIPT, "huge": "9" * 400, "negative": "-99999999999999999999", "long": "x" * 10_000}


@needs_ckpt
@pytest.mark.parametrize("value", list(HOSTILE))
@pytest.mark.parametrize("page", list(PAGE_PARAMS), ids=lambda p: p or "translate")
def test_every_parameter_of_a_page_hostile_at_once_gives_notes_not_a_traceback(page, value):
    names = [*PAGE_PARAMS[page], *UNKNOWN_NAMES]
    at = open_page(page or "translate", {name: HOSTILE[value] for name in names})
    assert not at.exception, [e.value[:300] for e in at.exception]
    assert notes_of(at) or at.error, "a hostile link is answered with a note"
    drawn = [e for e in at.markdown if SCRIPT in str(e.value) and e.proto.allow_html]
    assert not drawn, "a value from the link drawn as HTML"


def test_hostile_queries_name_a_page_and_an_unknown_parameter():
    import random

    rng = random.Random(1)
    for _ in range(50):
        page, query = hostile_query(rng)
        assert page in PAGE_PARAMS
        assert any(f"{name}=" in query for name in ("foo", "__proto__", "step%5B%5D", "%3Cb%3E"))
