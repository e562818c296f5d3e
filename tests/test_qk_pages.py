"""The Attention page's "Query · key" tab in Streamlit's AppTest, on every kind of model the app opens.

The shipped translator (encoder, decoder and cross-attention) and language model, tiny RoPE and ALiBi checkpoints
and the tiny Hugging Face MarianMT and GPT-2 folders: the tab renders without an error, its weights are the row of
the Heads tab's heatmap for the same kind, layer and head (to 1e-6), the query and the sort order live in the link,
and presentation mode enlarges every axis. The browser half is in ``test_qk_browser.py``.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

# the repository as working folder and no extra checkpoints (an autouse fixture), and the page helpers
from test_attention_views import _at_repo_root, assert_clean, charts, show, z_of  # noqa: F401
from test_url import BAD_VALUES, notes_of
from test_url import open_page as open_url_page

from model.checkpoint import load_checkpoint, save_checkpoint
from model.config import ModelConfig
from model.transformer import Transformer
from ui.presentation import MIN_TICK

ROOT = Path(__file__).resolve().parent.parent
TAB = "Query · key"
needs_models = pytest.mark.skipif(
    not all((ROOT / "checkpoints" / n / "model.safetensors").is_file() for n in ("en-de", "brown-lm")),
    reason="the shipped checkpoints are missing",
)


def open_attention(**query: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page("app_pages/attention/attention.py").run()
    assert_clean(at)
    return at


def heatmap_row(at: AppTest, query: int) -> np.ndarray:
    """Row ``query`` of the one heatmap the Heads tab draws for a single head (the masked future as 0)."""
    (heatmap,) = charts(show(at, "Heads"))
    return np.nan_to_num(z_of(heatmap["data"][0]))[query]


def qk_weights(at: AppTest) -> np.ndarray:
    score = charts(at)[0]
    x = next(t for t in score["data"] if t.get("name") == "weight")["x"]
    if isinstance(x, dict):  # plotly ships numpy arrays base64-encoded (one dimension: no "shape")
        return np.frombuffer(base64.b64decode(x["bdata"]), dtype=np.dtype(x["dtype"])).astype(float)
    return np.array(x, dtype=float)


def check_weights_are_the_heatmap_row(at: AppTest, query: int) -> None:
    row = heatmap_row(at, query)
    show(at, TAB)
    at.selectbox(key="at_token_query").select(query).run()
    assert_clean(at)
    assert len(charts(at)) == 3  # the scores, the vectors, the weighted values
    np.testing.assert_allclose(qk_weights(at), row, atol=1e-6)
    gap = re.search(r"largest difference ([0-9.e+-]+)\)", " ".join(c.value for c in at.caption))
    assert gap and float(gap.group(1)) <= 1e-6


@needs_models
@pytest.mark.parametrize("kind, query", [("encoder", 2), ("decoder", 3), ("cross", 4)])
def test_the_translator_weights_are_the_heatmap_row(kind, query):
    at = open_attention(kind=kind, layer="4", head="2")
    check_weights_are_the_heatmap_row(at, query)
    assert at.query_params["query"] == str(query)
    title = charts(at)[0]["layout"]["title"]["text"]
    assert "layer 4 · head 2" in title
    assert any(re.search(r"gives most weight to .+ weight \*\*\d\.\d\d\*\*", m.value) for m in at.markdown)
    if kind == "decoder":  # the future is masked: its rows grey, "masked (−∞)" beside them, weight 0
        assert any(t.get("name") == "masked" for t in charts(at)[0]["data"])
        assert np.all(qk_weights(at)[query + 1 :] == 0)
    assert "Download these numbers (.npz)" in [b.proto.label for b in at.get("download_button")]


@needs_models
def test_the_language_model_weights_are_the_heatmap_row():
    at = open_attention(ckpt="brown-lm", layer="2", head="1")
    assert at.radio(key="at_kind").value == "self"
    check_weights_are_the_heatmap_row(at, 3)


@needs_models
def test_query_and_sort_live_in_the_link_and_a_bad_value_gets_a_note():
    at = open_attention(tab=TAB, query="2", sort="1", head="3")
    assert at.selectbox(key="at_token_query").value == 2 and at.toggle(key="at_qk_sort").value is True
    score = charts(at)[0]
    assert "sorted" in score["layout"]["xaxis"]["title"]["text"]
    at.toggle(key="at_qk_sort").set_value(False).run()
    assert "sort" not in at.query_params and charts(at)[0]["layout"]["xaxis"]["ticktext"][:2] == ["0", "8"]
    show(at, "Tokens & lines")  # the same query row in the other tab that picks one
    assert at.selectbox(key="at_token_query").value == 2
    bad = open_attention(tab=TAB, query="many")
    assert any("`query`" in i.value for i in bad.info) and bad.selectbox(key="at_token_query").value == 0
    far = open_attention(tab=TAB, query="999")
    assert any("outside" in i.value for i in far.info)
    assert far.selectbox(key="at_token_query").value == len(far.selectbox(key="at_token_query").options) - 1
    mean = open_attention(tab=TAB, head="mean")
    assert any("this tab shows head 1" in c.value for c in mean.caption)
    assert "head 1" in charts(mean)[0]["layout"]["title"]["text"]


@needs_models
@pytest.mark.parametrize("bad", BAD_VALUES)
def test_bad_query_and_sort_values_get_a_note_never_a_traceback(bad):
    at = open_url_page("attention", {"tab": TAB, "query": bad, "sort": bad})
    assert_clean(at)
    assert "`query`" in notes_of(at) and "`sort`" in notes_of(at)
    assert len(charts(at)) == 3


@needs_models
def test_the_tab_s_controls_are_in_the_link_and_a_fresh_session_restores_them():
    at = open_url_page("attention", {"tab": TAB})
    controls = [
        ("radio", "at_kind", "decoder"),
        ("selectbox", "at_head", 3),
        ("selectbox", "at_token_query", 4),
        ("toggle", "at_qk_sort", True),
    ]
    for kind, key, value in controls:
        getattr(at, kind)(key=key).set_value(value).run()
        assert_clean(at)
    link = {k: at.query_params[k] for k in at.query_params}
    assert link["query"] == "4" and link["sort"] == "1"
    again = open_url_page("attention", {**link, "tab": TAB})
    assert [getattr(again, kind)(key=key).value for kind, key, _ in controls] == [v for _, _, v in controls]
    assert charts(again)[0]["layout"]["title"]["text"] == charts(at)[0]["layout"]["title"]["text"]


@needs_models
def test_presentation_mode_enlarges_every_axis_of_the_tab():
    at = open_attention(tab=TAB, present="1", query="3")
    sizes = []
    for chart in charts(at):
        for name, axis in chart["layout"].items():
            if name.startswith(("xaxis", "yaxis")) and axis.get("ticktext"):
                sizes.append((axis.get("tickfont") or {}).get("size") or 0)
    assert sizes and min(sizes) >= MIN_TICK


# --- RoPE and ALiBi: tiny random checkpoints with the shipped tokenizer -----------------------------------------------
@pytest.fixture(scope="module")
def positions_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("qk-positions")
    tokenizer = load_checkpoint(ROOT / "checkpoints" / "en-de").tokenizer
    for name, arch, pos in (("tiny-rope-lm", "decoder-only", "rope"), ("tiny-alibi", "encoder-decoder", "alibi")):
        cfg = ModelConfig(
            arch=arch,
            vocab_size=tokenizer.vocab_size,
            d_model=32,
            n_heads=4,
            n_encoder_layers=2 if arch == "encoder-decoder" else 0,
            n_decoder_layers=2,
            d_ff=64,
            pos_encoding=pos,
            norm_first=True,
        )
        torch.manual_seed(0)
        save_checkpoint(root / name, Transformer(cfg).eval(), tokenizer, {"task": f"test {pos} model"})
    return root


@needs_models
def test_rope_shows_q_and_k_before_and_after_the_rotation(monkeypatch, positions_root):
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(positions_root))
    at = open_attention(ckpt="tiny-rope-lm", head="2")
    check_weights_are_the_heatmap_row(at, 3)
    score, vectors, _ = charts(at)
    assert any(t.get("name") == "without RoPE's rotation" for t in score["data"])
    titles = [a["text"] for a in vectors["layout"]["annotations"]]
    assert "before the rotation" in titles and "after the rotation (as scored)" in titles
    assert any("RoPE rotates each pair" in c.value for c in at.caption)


@needs_models
def test_alibi_shows_the_bias_and_its_slope(monkeypatch, positions_root):
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(positions_root))
    at = open_attention(ckpt="tiny-alibi", kind="encoder", head="3")
    check_weights_are_the_heatmap_row(at, 2)
    assert any(t.get("name") == "+ ALiBi bias = logit" for t in charts(at)[0]["data"])
    slope = 2.0 ** (-8.0 * 3 / 4)  # head 3 of 4: m = 2^(−8·3/4)
    assert any(f"m = {slope:.4g}" in c.value for c in at.caption)
    assert any("plus ALiBi's" in m.value and "gives the logit" in m.value for m in at.markdown)


@pytest.mark.parametrize("name", ["opus-mt-tiny", "gpt2-tiny"])
def test_hugging_face_models_weights_are_the_heatmap_row(monkeypatch, name, hf_root):
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(hf_root.path))
    at = open_attention(ckpt=name, head="2", layer="2")
    check_weights_are_the_heatmap_row(at, 1)
    shown = json.dumps(charts(at), ensure_ascii=False)
    assert ("▁" if name == "opus-mt-tiny" else "␣") in shown and "Ġ" not in shown
