"""Tests of the teaching pages (Positional encoding, Tokenization, Worked examples): the worked numbers, the
sinusoidal linear-map property, BPE merge replay against ``tokenizers``, the figures, and each page through
``streamlit.testing.v1.AppTest`` (bad inputs must give a warning, never an exception)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from charts import teaching as vt
from model.positional import sinusoidal_table
from model.tokenizer import TextTokenizer
from teaching import worked
from viz import theme

ROOT = Path(__file__).resolve().parent.parent
CKPT = ROOT / "checkpoints" / "en-de"
HAS_CKPT = (CKPT / "model.safetensors").is_file() and (CKPT / "tokenizer.json").is_file()
needs_ckpt = pytest.mark.skipif(not HAS_CKPT, reason="checkpoints/en-de is missing")


# --- worked examples -------------------------------------------------------------------------------
def test_reference_attention_values():
    r = worked.attention_steps(worked.REF_Q, worked.REF_K, worked.REF_V, scale=True)
    np.testing.assert_allclose(r["weights"][0], [0.3173, 0.3266, 0.3561], atol=1e-4)
    np.testing.assert_allclose(r["output"][0], [0.3742, 0.1991, 0.3019], atol=1e-4)
    np.testing.assert_allclose(r["weights"].sum(axis=1), 1.0, atol=1e-12)  # rows, not columns
    np.testing.assert_allclose(r["scaled"], r["scores"] / math.sqrt(3))
    ref = torch.softmax(torch.tensor(worked.REF_Q) @ torch.tensor(worked.REF_K).T / math.sqrt(3), dim=-1)
    np.testing.assert_allclose(r["weights"], ref.numpy(), atol=1e-12)


def test_causal_example():
    r = worked.attention_steps(worked.REF_CAUSAL_SCORES, np.eye(3), np.eye(3), scale=False, causal=True)
    np.testing.assert_allclose(r["weights"], [[1, 0, 0], [0.4750, 0.5250, 0], [0.3006, 0.3322, 0.3672]], atol=1e-4)
    assert np.isneginf(r["masked"][0, 1]) and np.isneginf(r["masked"][0, 2])


def test_attention_rejects_bad_shapes():
    with pytest.raises(ValueError):
        worked.attention_steps(np.ones((3, 2)), np.ones((3, 3)), np.ones((3, 3)))
    with pytest.raises(ValueError):
        worked.attention_steps(np.ones((3, 3)), np.ones((3, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError):
        worked.attention_steps(np.full((3, 3), np.nan), np.ones((3, 3)), np.ones((3, 3)))


def test_layer_norm_matches_torch():
    rng = np.random.default_rng(1)
    x, g, b = rng.normal(size=(4, 6)) * 3 + 2, rng.normal(size=6), rng.normal(size=6)
    r = worked.layer_norm_steps(x, g, b)
    np.testing.assert_allclose(r["normalised"].mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(r["normalised"].var(axis=1), 1, atol=1e-4)
    ref = torch.nn.functional.layer_norm(torch.tensor(x), (6,), torch.tensor(g), torch.tensor(b), eps=1e-5)
    np.testing.assert_allclose(r["output"], ref.numpy(), atol=1e-10)
    with pytest.raises(ValueError):
        worked.layer_norm_steps(x, g[:3], b)


def test_split_concat_heads():
    x = np.arange(24.0).reshape(3, 8)
    h = worked.split_heads(x, 4)
    assert h.shape == (4, 3, 2)
    np.testing.assert_array_equal(h[1], x[:, 2:4])
    np.testing.assert_array_equal(worked.concat_heads(h), x)
    with pytest.raises(ValueError):
        worked.split_heads(x, 3)


def test_scaling_demo_shows_the_expectation_not_one_noisy_draw():
    """With q, k entries i.i.d. (mean 0, variance 1), q·k has std √d_k exactly: the page once showed one draw of 10
    scores (std 0.63 at d_k 4, where the text promises 2) and a largest weight that fell as d_k grew (0.9989 at 64,
    0.7613 at 256)."""
    rows = worked.scaling_demo(seed=0)
    d_ks = [r["d_k"] for r in rows]
    assert d_ks == [2**i for i in range(11)]  # evenly spaced on a log axis
    for r in rows:
        assert r["score_std"] == pytest.approx(math.sqrt(r["d_k"]), rel=1e-12)  # exact
        assert r["score_std_sampled"] == pytest.approx(math.sqrt(r["d_k"]), rel=0.02)  # and the draws agree
    max_raw = [r["max_raw"] for r in rows]
    assert all(b > a for a, b in zip(max_raw, max_raw[1:], strict=False)), max_raw  # saturates monotonically…
    assert max_raw[0] < 0.3 and max_raw[-1] > 0.95  # …from near the scaled value to one key taking everything
    # scaled: the spread is 1 at every d_k, so the largest weight stays put (far from 1)
    assert all(0.25 < r["max_scaled"] < 0.35 for r in rows), [r["max_scaled"] for r in rows]
    assert all(r["entropy_raw"] <= r["entropy_scaled"] + 1e-9 < math.log(10) for r in rows)
    assert rows[-1]["entropy_raw"] < 0.2 < 1.8 < rows[-1]["entropy_scaled"]
    assert rows == worked.scaling_demo(seed=0)  # seeded
    assert rows[2]["max_raw"] == pytest.approx(worked.scaling_demo(seed=7)[2]["max_raw"], abs=0.01)  # not seed luck
    with pytest.raises(ValueError):
        worked.scaling_demo(n_keys=1)


def test_scaling_chart_has_log_axes():
    fig = vt.scaling_chart(worked.scaling_demo(n_draws=200))
    assert fig.layout.xaxis.type == fig.layout.xaxis2.type == "log"  # d_k from 1 to 1024
    assert fig.layout.yaxis.type == "log"  # std √d_k: a straight line
    assert list(fig.layout.yaxis2.range) == [0, 1.02]  # the largest weight, 0–1
    names = {t.name for t in fig.data}
    assert names == {"q·k", "q·k / √d_k"} and len(fig.data) == 4
    scaled_std = next(t for t in fig.data if t.name == "q·k / √d_k" and t.xaxis == "x")
    assert set(scaled_std.y) == {1.0}


# --- positional encoding -------------------------------------------------------------------------------
def test_sinusoidal_matches_model_and_base_10000():
    np.testing.assert_allclose(worked.sinusoidal(50, 16), sinusoidal_table(50, 16).numpy(), atol=1e-6)
    t = worked.sinusoidal(20, 8)
    assert t[3, 2] == pytest.approx(math.sin(3 / 10000 ** (2 / 8)))
    assert t[3, 3] == pytest.approx(math.cos(3 / 10000 ** (2 / 8)))
    with pytest.raises(ValueError):
        worked.sinusoidal(10, 7)


@pytest.mark.parametrize("d_model,k", [(2, 1), (16, 3), (64, 5), (128, 17), (512, 40)])
def test_block_rotation_shifts_positions(d_model, k):
    m = worked.block_rotation(k, d_model)
    for table in (worked.sinusoidal(128, d_model), sinusoidal_table(128, d_model).double().numpy()):
        for pos in (0, 1, 7, 50, 128 - k - 1):
            assert np.abs(m @ table[pos] - table[pos + k]).max() < 1e-5
    assert max(r["max abs error"] for r in worked.rotation_errors(worked.sinusoidal(128, d_model), k, range(60))) < 1e-5
    if k:  # the other sign convention (the transpose) rotates the wrong way
        table = worked.sinusoidal(128, d_model)
        assert np.abs(m.T @ table[10] - table[10 + k]).max() > 1e-3


# --- figures ---------------------------------------------------------------------------------------------
def test_position_numbers_follow_the_papers():
    """teaching.positions computes with the model's code; the papers' formulas, written out here, must agree."""
    from teaching import positions

    assert positions.rope_angles(10, 8).shape == (10, 4)
    assert positions.rope_angles(5, 4)[3, 1] == pytest.approx(3 * 10000 ** (-2 / 4), rel=1e-6)
    theta = np.arange(7)[:, None] * 10000.0 ** (-np.arange(0, 8, 2) / 8)[None, :]  # Su et al. 2021
    np.testing.assert_allclose(positions.rope_angles(7, 8), np.mod(theta, 2 * np.pi), atol=1e-5)
    with pytest.raises(ValueError):
        positions.rope_angles(3, 5)
    b = positions.alibi_bias_matrix(0.5, 5)
    assert b.shape == (5, 5) and b[0, 0] == 0 and b[0, 4] == -2.0 and b[4, 0] == -2.0
    assert positions.similarity(np.ones((7, 4))).shape == (7, 7)


def test_alibi_slopes_are_read_from_the_loaded_model():
    from model.attention import MultiHeadAttention
    from teaching import positions

    layer = MultiHeadAttention(16, 8, position="alibi")
    np.testing.assert_allclose(positions.model_alibi_slopes(layer, 8), 2.0 ** -np.arange(1, 9))  # Press et al.
    layer.slopes = layer.slopes * 3  # a model whose slopes differ is shown as it is, not as the formula says
    np.testing.assert_allclose(positions.model_alibi_slopes(layer, 8), 3 * 2.0 ** -np.arange(1, 9))


def test_viz_shapes():
    fig = vt.matrix_heatmap(np.zeros((6, 4)))
    assert np.asarray(fig.data[0].z).shape == (6, 4)
    fig = vt.annotated_matrix(np.array([[0.5, -np.inf]]))
    assert list(fig.data[0].text[0]) == ["0.5000", "−∞"]
    # the largest value darkest, as on the attention heatmap beside it (plotly.js reads the name "Blues" backwards),
    # and numbers a back row can read
    (low, *_), (*_, high) = fig.data[0].colorscale[0], fig.data[0].colorscale[-1]
    assert low == 0 and high == "#08306b" and fig.data[0].textfont.size >= 14
    assert len(vt.dimension_waves(np.zeros((9, 4)), [0, 3, 99]).data) == 2
    assert len(vt.norm_histogram([1, 2], [3]).data) == 2
    html = vt.token_spans_html("a <b>", ["▁", "▁a", "▁<b>"], [5, 6, 7], [(0, 0), (0, 1), (1, 5)])
    assert "∅" in html and "&lt;b&gt;" in html and "<b>" not in html
    assert theme.ERROR_BG in vt.token_spans_html("🙂", ["<unk>"], [3], [(0, 1)])


# --- the pages --------------------------------------------------------------------------------------------
def _app(page: str, **params):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _warnings(at) -> str:
    return " ".join(str(w.value) for w in at.warning)


def _notes(at) -> str:
    """What the page says about its link's values (``st.info``)."""
    return " ".join(str(i.value) for i in at.info)


@needs_ckpt
def test_positional_page_renders():
    at = _app("app_pages/positional/positional.py")
    assert not at.warning
    assert len(at.get("plotly_chart")) >= 5
    assert any("10000" in str(i.value) and "1000" in str(i.value) for i in at.info)
    errors = at.dataframe[0].value["max abs error"]
    assert float(errors.max()) < 1e-9


@needs_ckpt
@pytest.mark.parametrize(
    "params,expect",
    [
        ({"d_model": "7"}, "even"),
        ({"length": "0"}, "outside 1–512; showing 1"),
        ({"length": "100000"}, "outside 1–512; showing 512"),
        ({"d_model": "4096"}, "outside 2–1024; showing 1024"),
        ({"offset": "999"}, "offset"),
    ],
)
def test_positional_page_bad_inputs_warn(params, expect):
    at = _app("app_pages/positional/positional.py", **params)
    assert expect in _warnings(at) + _notes(at)


@needs_ckpt
def test_positional_page_ignores_garbage_with_a_note():
    at = _app("app_pages/positional/positional.py", d_model="abc", length="x", offset="?")
    assert not at.warning
    assert all(f"`{name}`" in _notes(at) for name in ("d_model", "length", "offset"))


@needs_ckpt
def test_tokenization_page():
    at = _app("app_pages/tokenization/tokenization.py")
    assert not at.warning
    assert any("Final:" in str(c.value) for c in at.caption)
    at.selectbox(key="tk_word").set_value(2).run()
    assert not at.exception
    at.text_area(key="tk_text").set_value("").run()
    assert not at.exception and "Type some text" in _warnings(at)
    at.text_area(key="tk_train_text").set_value("   ").run()
    assert not at.exception and "Paste some text" in _warnings(at)
    at.text_area(key="tk_text").set_value("I 🙂 it").run()
    assert not at.exception and "<unk>" in _warnings(at)


@needs_ckpt
def test_tokenization_word_box_shows_the_new_word_after_the_text_changes():
    """The Word box keeps its number when the text changes, but its label ("2: ▁word") changes: the browser must be
    sent the new label, or it goes on showing the old word while the replay below shows the new one."""
    at = _app("app_pages/tokenization/tokenization.py", tok_text="Bobby likes blackberries.")
    at.selectbox(key="tk_word").set_value(2).run()
    at.text_area(key="tk_text").set_value("Alice went to the market.").run()
    box = at.selectbox(key="tk_word")
    assert box.value == 2 and list(box.options)[2] == "2: ▁to"
    # what the browser is told to show (without set_value it keeps its own, old label)
    assert box.proto.set_value and box.proto.raw_value == "2: ▁to"
    assert any(str(c.value).startswith("Final: ▁to ") for c in at.caption)


@needs_ckpt
@pytest.mark.parametrize("vocab,expect", [("5", "30"), ("999999", "2000"), ("2000", None), ("30", None), ("x", None)])
def test_tokenization_page_vocab_extremes(vocab, expect):
    at = _app("app_pages/tokenization/tokenization.py", vocab=vocab)
    assert not at.warning
    if expect:
        assert f"showing {expect}" in _notes(at)
    assert at.slider(key="tk_vocab").value == int(expect or (vocab if vocab.isdigit() else 120))


@needs_ckpt
def test_lecture_page():
    at = _app("app_pages/lecture/lecture.py")
    assert not at.warning
    assert len(at.get("plotly_chart")) >= 10
    # the Q / K / V input tables were unlabeled: each has a heading saying what its rows are
    headings = [str(m.value) for m in at.markdown]
    for name, what in (("Q", "queries"), ("K", "keys"), ("V", "values"), ("X", "one row per token")):
        assert any(h.startswith(f"**{name}** — {what}") for h in headings), (name, headings)
    at = _app("app_pages/lecture/lecture.py", causal="1", scaled="0", seed="zz")
    assert at.checkbox(key="we_causal").value and not at.checkbox(key="we_scale").value
    at.radio(key="we_heads").set_value(4).run()
    assert not at.exception


@pytest.fixture(scope="module")
def lecture_app():
    if not HAS_CKPT:
        pytest.skip("checkpoints/en-de is missing")
    return _app("app_pages/lecture/lecture.py")


def test_lecture_weights_times_v_names_the_feature_columns_of_v(lecture_app):
    """Weights × V has one column per feature of V, named as V's editor names them (d0, d1, …); v0, v1, … name V's
    rows (one per key), which the output does not have."""
    (out,) = [
        json.loads(c.proto.spec)
        for c in lecture_app.get("plotly_chart")
        if json.loads(c.proto.spec)["layout"]["title"]["text"].startswith("5. Weights × V")
    ]
    assert list(out["data"][0]["x"]) == ["d0", "d1", "d2"]  # V's editor: rows v0…v2, columns d0…d2
    assert list(out["data"][0]["y"]) == ["q0", "q1", "q2"]


def test_lecture_errata_are_a_neutral_note_not_an_error(lecture_app):
    assert not lecture_app.error  # nothing on the page went wrong
    notes = " ".join(str(m.value) for m in lecture_app.markdown)
    assert "Softmax over columns" in notes and "bitwise XOR" in notes and "10000" in notes


def test_norm_histogram_legend_sits_above_the_plot_not_on_the_axis_title():
    """The legend under the histogram covered the "vector norm" axis title."""
    fig = vt.norm_histogram([1, 2], [3], "How loud is the position signal?")
    assert fig.layout.legend.yanchor == "bottom" and fig.layout.legend.y >= 1.0
    assert fig.layout.margin.t >= 90  # room for the title and the legend line under it
    assert fig.layout.xaxis.title.text == "vector norm"
    assert fig.data[0].xbins == fig.data[1].xbins  # one set of bins: a constant PE norm is drawn too


def test_norm_histogram_draws_the_constant_pe_bar_whole():
    """Every ‖PE(pos)‖ of a sinusoidal table is √(d_model/2), below every embedding norm: Plotly's autorange began
    the x axis at that value and cut its bar in half. Every bin must lie inside the axis, none start at a value."""
    rng = np.random.default_rng(0)
    emb, pe = rng.normal(22, 4, 8000).clip(min=13), np.full(128, math.sqrt(128))
    fig = vt.norm_histogram(emb, pe)
    lo, hi = fig.layout.xaxis.range
    bins = fig.data[1].xbins
    assert fig.data[0].xbins == bins
    pe_bin = bins.start + bins.size * math.floor((pe[0] - bins.start) / bins.size)
    assert pe_bin < pe[0] and lo < pe_bin and pe_bin + bins.size < hi  # the bar, whole, inside the axis
    assert lo < bins.start and bins.end < hi and bins.end >= emb.max()
    one = vt.norm_histogram([], [5.0, 5.0])  # a single value: still a bar of some width around it
    assert one.data[1].xbins.size > 0 and one.layout.xaxis.range[0] < 5.0 < one.layout.xaxis.range[1]


@needs_ckpt
@pytest.mark.parametrize("kind", ["learned", "rope", "alibi", "none"])
def test_positional_page_for_other_encodings(kind, tmp_path, monkeypatch):
    from model.checkpoint import save_checkpoint
    from model.config import ConfigError, ModelConfig
    from model.transformer import Transformer

    tok = TextTokenizer.train(["the cat sat", "die Katze sitzt"], vocab_size=40, min_frequency=1)
    try:
        cfg = ModelConfig(
            vocab_size=tok.vocab_size,
            d_model=16,
            n_heads=2,
            n_encoder_layers=1,
            n_decoder_layers=1,
            d_ff=32,
            max_len=16,
            pos_encoding=kind,
        )
        cfg.validate()
    except (ConfigError, TypeError) as exc:
        pytest.skip(f"{kind} not available: {exc}")
    torch.manual_seed(0)
    save_checkpoint(tmp_path / f"tiny-{kind}", Transformer(cfg).eval(), tok)
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(tmp_path))
    at = _app("app_pages/positional/positional.py", ckpt=f"tiny-{kind}")
    assert at.sidebar.selectbox(key="app_ckpt").value == f"tiny-{kind}"
    assert any(f"**{kind}**" in str(m.value) for m in at.markdown)
    assert not at.warning and not at.error


def test_pieces_html_is_safe_in_markdown_tables():
    out = vt.pieces_html(["a|b", "<i>"], [True, False])
    assert "|" not in out and "&lt;i&gt;" in out and "#e4572e" in out
