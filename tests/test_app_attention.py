"""App-level AppTest tests of the Attention page: its defaults, kinds, layers and heads, the URL, its own text box,
and the step surviving a round trip between pages."""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import (
    ATTENTION_PAGE,
    CARD,
    CFG,
    TRANSLATE_PAGE,
    assert_clean,
    button,
    chart_titles,
    chip_markdown,
    heat_z,
    make_app,
    n_charts,
)
from streamlit.testing.v1 import AppTest

from ui.model_card import opening_layer
from ui.state import PRESETS
from viz.labels import KIND_TITLES

pytestmark = pytest.mark.usefixtures("app_at_repo_root")


# --- Attention page ------------------------------------------------------------------------------------
@pytest.fixture
def attention_page() -> AppTest:
    at = make_app()
    at.switch_page(ATTENTION_PAGE).run()
    assert_clean(at)
    return at


def test_attention_page_defaults(attention_page):
    at = attention_page
    assert at.title[0].value == "Attention"
    assert at.text_input(key="at_text").value == PRESETS[0]
    radio = at.radio(key="at_kind")
    assert radio.options == ["Encoder self", "Decoder self (masked)", "Cross (decoder → encoder)"]
    assert radio.value == "cross"
    assert at.selectbox(key="at_head").value == "all"
    assert n_charts(at) == CFG.n_heads
    assert "kind" not in at.query_params  # the default stays out of the link


@pytest.mark.parametrize(
    "kind, n_layers_attr",
    [("encoder", "n_encoder_layers"), ("decoder", "n_decoder_layers"), ("cross", "n_decoder_layers")],
)
def test_attention_kinds_layers_and_heads(attention_page, kind, n_layers_attr):
    at = attention_page
    at.radio(key="at_kind").set_value(kind).run()
    assert_clean(at)
    assert at.query_params.get("kind", "cross") == kind  # cross, the default, is left out
    n_layers = getattr(CFG, n_layers_attr)
    layer_box = at.selectbox(key="at_layer")
    assert layer_box.options == [f"layer {i + 1}" for i in range(n_layers)]
    opened = opening_layer(CARD, n_layers)
    assert layer_box.value == opened

    # "all heads": one chart per head.
    title = KIND_TITLES[kind]
    assert n_charts(at) == CFG.n_heads
    assert chart_titles(at) == [f"{title} · layer {opened + 1} · head {h + 1}" for h in range(CFG.n_heads)]
    first = heat_z(at, 0)
    rows, cols = first.shape
    assert np.allclose(np.nansum(first, axis=1), 1.0, atol=1e-4)  # every row sums to 1
    if kind == "encoder":
        assert rows == cols  # source × source
    elif kind == "decoder":
        assert rows == cols and np.isnan(first[np.triu_indices(rows, k=1)]).all()  # the future is blanked
    else:
        assert not np.isnan(first).any()

    at.selectbox(key="at_layer").select(0).run()
    assert_clean(at)
    assert chart_titles(at) == [f"{title} · layer 1 · head {h + 1}" for h in range(CFG.n_heads)]

    at.selectbox(key="at_head").select("mean").run()
    assert_clean(at)
    assert n_charts(at) == 1 and chart_titles(at) == [f"{title} · layer 1 · mean over heads"]

    at.selectbox(key="at_head").select(CFG.n_heads - 1).run()
    assert_clean(at)
    assert n_charts(at) == 1 and chart_titles(at) == [f"{title} · layer 1 · head {CFG.n_heads}"]
    assert heat_z(at, 0).shape == (rows, cols)


def test_attention_kind_from_query_param():
    at = make_app(kind="encoder")
    at.switch_page(ATTENTION_PAGE).run()
    assert_clean(at)
    assert at.radio(key="at_kind").value == "encoder"


def test_attention_page_text_input(attention_page):
    at = attention_page
    at.text_input(key="at_text").set_value("").run()
    assert_clean(at)
    assert len(at.warning) == 1 and "empty" in at.warning[0].value and n_charts(at) == 0
    at.text_input(key="at_text").set_value("I love 🍕").run()
    assert_clean(at)
    assert any("<unk>" in i.value for i in at.info) and n_charts(at) == CFG.n_heads
    # The sentence is shared with the Translate page.
    at.switch_page(TRANSLATE_PAGE).run()
    assert_clean(at)
    assert at.text_input(key="tr_text").value == "I love 🍕"
    assert at.session_state["tr_step"] == 0


def test_step_survives_a_page_round_trip():
    at = make_app()
    button(at, "Next").click().run()
    button(at, "Next").click().run()
    before = chip_markdown(at)
    at.switch_page(ATTENTION_PAGE).run()
    assert_clean(at)
    at.switch_page(TRANSLATE_PAGE).run()
    assert_clean(at)
    assert at.session_state["tr_step"] == 2 and chip_markdown(at) == before
