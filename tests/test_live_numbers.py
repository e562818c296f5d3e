"""The Worked examples page's live numbers: one head of a loaded model, step by step (``teaching/live.py``,
``app_pages/lecture/live.py``).

The head's weights must be the model's own, equal to the traced forward pass that the Attention page draws (≤ 1e-6),
for every attention kind, pre-LN and post-LN, every position scheme, the shipped models and Hugging Face folders;
``X W^Q + b^Q`` must give its Q; the cut shows exact columns. Then the page, through AppTest: it renders on en-de,
brown-lm and the Hugging Face fixtures, keeps its choices in the link, notes bad link values, forgets a model's
choices for another model, and leaves the editable example's matrices as they were.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from model.checkpoint import load_checkpoint
from model.config import ConfigError
from reading.trace import trace_pair
from teaching import live

ROOT = Path(__file__).resolve().parent.parent
EN_DE, BROWN = ROOT / "checkpoints" / "en-de", ROOT / "checkpoints" / "brown-lm"
needs_ckpt = pytest.mark.skipif(
    not (EN_DE / "model.safetensors").is_file() or not (BROWN / "model.safetensors").is_file(),
    reason="the shipped checkpoints are missing",
)
ATOL = 1e-6


def head_of(model, src_ids, tgt_ids, kind, layer, head) -> live.LiveHead:
    """:func:`teaching.live.live_head` on the trace of ``src_ids`` / ``tgt_ids``."""
    src = src_ids if model.cfg.is_encoder_decoder else None
    return live.live_head(model, trace_pair(model, None, src, tgt_ids), kind, layer, head)


def assert_weights_are_the_traces(model, tok, src_ids, tgt_ids, heads=None) -> None:
    """Every kind and layer, the given heads (default: all): ``live_head``'s weights = the traced forward pass's."""
    trace = trace_pair(model, tok, src_ids, tgt_ids)
    for kind in live.kinds_of(model):
        for layer in range(live.layers_of(model, kind)):
            for head in heads or range(model.cfg.n_heads):
                h = live.live_head(model, trace, kind, layer, head)
                expected = trace.attention[kind][layer, head].double().numpy()
                np.testing.assert_allclose(h.weights, expected, atol=ATOL, rtol=0, err_msg=f"{kind} {layer} {head}")


# --- the numbers: tiny models of every shape ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [
        dict(norm_first=False),
        dict(norm_first=True),
        dict(pos_encoding="learned"),
        dict(pos_encoding="rope"),
        dict(pos_encoding="alibi"),
        dict(arch="decoder-only", n_encoder_layers=0, norm_first=True),
        dict(arch="decoder-only", n_encoder_layers=0, pos_encoding="rope"),
    ],
    ids=["post-ln", "pre-ln", "learned", "rope", "alibi", "decoder-only", "decoder-only-rope"],
)
def test_the_weights_are_the_models_own(make_model, tokenizer, encode_src, overrides):
    try:
        model = make_model(**overrides)
    except ConfigError as exc:
        pytest.skip(f"not a valid model here: {exc}")
    src = encode_src("The cat sleeps.") if model.cfg.is_encoder_decoder else None
    tgt = [model.cfg.bos_id] + tokenizer.encode("Die Katze schläft.").ids
    assert_weights_are_the_traces(model, tokenizer, src, tgt)


def test_q_k_v_are_x_times_the_heads_columns_plus_bias(make_model, tokenizer, encode_src):
    model = make_model(norm_first=True)
    src, tgt = encode_src("The dog is small."), [1] + tokenizer.encode("Der Hund ist klein.").ids
    for kind in ("encoder", "decoder", "cross"):
        h = head_of(model, src, tgt, kind, 1, 2)
        assert h.w_q.shape == (h.d_model, h.d_k) and h.b_q.shape == (h.d_k,) and h.w_o.shape == (h.d_k, h.d_model)
        np.testing.assert_allclose(h.x_q @ h.w_q + h.b_q, h.q, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(h.x_kv @ h.w_k + h.b_k, h.k, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(h.x_kv @ h.w_v + h.b_v, h.v, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(h.weights.sum(axis=1), 1.0, atol=1e-6)
    with torch.inference_mode():
        memory, _ = model.encode(torch.tensor([src]))
        embedded = model.embed_tokens(torch.tensor([src]))[0]
    cross = head_of(model, src, tgt, "cross", 0, 0)
    np.testing.assert_allclose(cross.x_kv, memory[0].double().numpy(), atol=1e-6)  # keys read the memory
    first = head_of(model, src, tgt, "encoder", 0, 0)
    ln = model.encoder_layers[0].res_attn.norm
    with torch.inference_mode():
        np.testing.assert_allclose(first.x_q, ln(embedded).double().numpy(), atol=1e-6)  # pre-LN: LN(emb + PE)
    assert first.x_note().startswith("LayerNorm(the token embeddings")
    assert "memory" in cross.x_kv_note() and "masked self-attention" in cross.x_note()


def test_post_ln_layer_one_reads_the_embeddings_plus_positions(make_model, encode_src):
    model = make_model(norm_first=False)
    src = encode_src("I need help.")
    h = head_of(model, src, [1, 5], "encoder", 0, 3)
    with torch.inference_mode():
        np.testing.assert_allclose(h.x_q, model.embed_tokens(torch.tensor([src]))[0].double().numpy(), atol=0)
    assert h.x_note() == "the token embeddings × √d_model + positions"
    assert head_of(model, src, [1, 5], "encoder", 1, 0).x_note() == "the residual stream entering layer 2"


def test_the_values_are_frozen_and_read_only(make_model, encode_src):
    h = head_of(make_model(), encode_src("Good night."), [1, 7, 9], "decoder", 1, 1)
    assert h.causal and np.all(np.triu(h.weights, 1) == 0)  # the future keys have no weight
    for name in ("x_q", "w_q", "b_v", "w_o", "q", "k", "v", "weights"):
        with pytest.raises(ValueError):
            getattr(h, name)[0] = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.layer = 0


def test_bad_choices_are_refused_with_a_reason(make_model, encode_src):
    model, src = make_model(), encode_src("Good night.")
    for kind, layer, head, says in (
        ("self", 0, 0, "attention kinds"),
        ("encoder", 2, 0, "layer 3"),
        ("cross", 0, 4, "head 5"),
        ("encoder", -1, 0, "layer 0"),
    ):
        with pytest.raises(ValueError, match=says):
            head_of(model, src, [1], kind, layer, head)
    with pytest.raises(ValueError, match="no tokens"):  # a trace read back from a run's files has no modules
        live.live_head(model, dataclasses.replace(trace_pair(model, None, src, [1]), modules={}), "encoder", 0, 0)


def test_the_cut_shows_exact_columns_and_says_what_it_left_out(make_model, encode_src):
    model = make_model()
    src = encode_src("The exercise is easy.")  # 5 pieces or more with <eos>
    h = head_of(model, src, [1, 4, 5], "cross", 1, 0)
    c = live.cut(h, tokens=2, columns=3)
    assert (c.n_q, c.n_k, c.n_cols, c.n_features, c.q_total, c.k_total) == (2, 2, 3, 3, 3, len(src))
    m = c.of(h)
    np.testing.assert_array_equal(m["q"], h.q[:2, :3])
    np.testing.assert_array_equal(m["k"], h.k[:2, :3])
    np.testing.assert_array_equal(m["w_v"], h.w_v[:3, :3])
    np.testing.assert_array_equal(m["x_kv"], h.x_kv[:2, :3])
    assert m["b_q"].shape == (1, 3) and c.drops_keys
    whole = live.cut(h, tokens=99, columns=99)
    assert (whole.n_q, whole.n_k, whole.n_cols) == (3, len(src), h.d_k) and not whole.drops_keys
    full, shown = live.score_split(h, 3, 1, 0)
    assert full == pytest.approx(float(h.q[1] @ h.k[0])) and shown == pytest.approx(float(h.q[1, :3] @ h.k[0, :3]))
    with pytest.raises(ValueError):
        live.cut(h, tokens=0)


def test_the_export_holds_every_array_and_the_tokens(make_model, encode_src):
    h = head_of(make_model(), encode_src("Good night."), [1, 7], "encoder", 0, 2)
    data = np.load(io.BytesIO(live.npz_bytes(h, ["a", "b", "c", "d"], ["a", "b", "c", "d"])))
    np.testing.assert_array_equal(data["weights"], h.weights)
    np.testing.assert_allclose(data["output"], h.weights @ h.v)
    assert list(data["q_tokens"]) == ["a", "b", "c", "d"] and int(data["head"]) == 3 and str(data["kind"]) == "encoder"
    assert {"x_q", "x_kv", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "q", "k", "v"} <= set(data.files)


# --- the shipped models and Hugging Face folders ---------------------------------------------------------------
@needs_ckpt
def test_the_shipped_models_weights_are_the_attention_pages():
    for folder, text in ((EN_DE, "My brother lives in Berlin."), (BROWN, "The jury said that")):
        ckpt = load_checkpoint(folder)
        ids = ckpt.tokenizer.encode(text).ids
        if ckpt.config.is_encoder_decoder:
            src, tgt = ids + [ckpt.config.eos_id], [ckpt.config.bos_id] + ckpt.tokenizer.encode("Mein Bruder").ids
        else:
            src, tgt = None, [ckpt.config.bos_id] + ids
        assert_weights_are_the_traces(ckpt.model, ckpt.tokenizer, src, tgt, heads=(0, ckpt.config.n_heads - 1))


@pytest.mark.parametrize("name", ["opus-mt-tiny", "gpt2-tiny"])
def test_hugging_face_weights_are_the_attention_pages(hf_root, name):
    """Marian is post-LN and starts its decoder from <pad>; GPT-2's fused c_attn was split on loading."""
    ckpt = load_checkpoint(hf_root.path / name)
    cfg = ckpt.config
    ids = ckpt.tokenizer.encode("The cat sat on the mat.").ids
    start = cfg.pad_id if cfg.is_encoder_decoder else cfg.bos_id
    src = ids + [cfg.eos_id] if cfg.is_encoder_decoder else None
    assert_weights_are_the_traces(ckpt.model, ckpt.tokenizer, src, [start] + ids[:4])


# --- the page -----------------------------------------------------------------------------------------------------
def open_lecture(monkeypatch, checkpoints: Path | None = None, **query: str):
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)
    if checkpoints is None:
        monkeypatch.delenv("ATTENTION_EXPLORER_CHECKPOINTS", raising=False)
    else:
        monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(checkpoints))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page("app_pages/lecture/lecture.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def chart_titles(at) -> list[str]:
    return [json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "") for c in at.get("plotly_chart")]


def largest_difference(at) -> float:
    """The page's own comparison with the Attention page's heatmap, from its caption."""
    found = (re.search(r"differs from these weights by at most ([0-9.e+-]+)", c.value) for c in at.caption)
    (match,) = [m for m in found if m]
    return float(match.group(1))


def assert_live_page(at, d_k: int, causal: bool) -> None:
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    titles = chart_titles(at)
    assert f"W<sup>Q</sup>: {min(4, d_k)} of {d_k} columns" in titles, titles
    assert f"2. ÷ √d_k = √{min(4, d_k)}" in titles
    assert ("3. Causal mask: future keys → −∞" in titles) == causal
    assert largest_difference(at) <= ATOL
    text = " ".join(str(m.value) for m in at.markdown)
    if d_k > 4:  # the cut drops columns
        assert "Why step 4 is not the model's weights" in text and f"divides by √{d_k}" in text
    assert any(b.label.startswith("Download this head's numbers") for b in at.get("download_button"))


@needs_ckpt
def test_the_live_numbers_of_the_shipped_translator_and_their_link(monkeypatch):
    at = open_lecture(monkeypatch, numbers="live")
    assert_live_page(at, 64, causal=False)
    assert "X** = LayerNorm(the token embeddings" in " ".join(str(m.value) for m in at.markdown)
    assert dict(at.query_params) == {"numbers": "live"}  # the defaults stay out of the link
    at.radio(key="we_kind").set_value("cross").run()
    at.selectbox(key="we_layer").set_value(2).run()
    at.selectbox(key="we_head").set_value(4).run()
    assert_live_page(at, 64, causal=False)
    assert "memory" in " ".join(str(m.value) for m in at.markdown)
    link = dict(at.query_params)
    assert link == {"numbers": "live", "kind": "cross", "layer": "3", "head": "5"}
    again = open_lecture(monkeypatch, **link)
    assert (
        again.radio(key="we_kind").value,
        again.selectbox(key="we_layer").value,
        again.selectbox(key="we_head").value,
    ) == ("cross", 2, 4)
    assert dict(again.query_params) == link


@needs_ckpt
def test_leaving_the_live_numbers_takes_their_choices_out_of_the_link(monkeypatch):
    at = open_lecture(monkeypatch, numbers="live", kind="cross", layer="3", head="5")
    at.radio(key="we_numbers").set_value("example").run()
    assert not at.exception and not {"numbers", "kind", "layer", "head"} & set(at.query_params)
    at.radio(key="we_numbers").set_value("live").run()  # back again: the link and the controls agree
    link = dict(at.query_params)
    assert (
        at.radio(key="we_kind").value,
        at.selectbox(key="we_layer").value + 1,
        at.selectbox(key="we_head").value + 1,
    ) == (link.get("kind", "encoder"), int(link.get("layer", 1)), int(link.get("head", 1)))


@needs_ckpt
def test_the_language_models_live_numbers_and_a_checkpoint_switch(monkeypatch):
    at = open_lecture(monkeypatch, numbers="live", kind="decoder", layer="5", head="6")
    at.sidebar.selectbox(key="app_ckpt").select("brown-lm").run()
    assert at.radio(key="we_kind").options == ["Self (masked)"]
    assert (at.selectbox(key="we_layer").value, at.selectbox(key="we_head").value) == (0, 0)
    assert_live_page(at, 48, causal=True)
    assert not {"kind", "layer", "head"} & set(at.query_params)
    at = open_lecture(monkeypatch, ckpt="brown-lm", numbers="live", layer="4", head="4", present="1")
    assert_live_page(at, 48, causal=True)


@needs_ckpt
def test_bad_link_values_are_noted_and_the_page_still_draws(monkeypatch):
    at = open_lecture(monkeypatch, numbers="live", kind="zzz", layer="99", head="abc")
    notes = " ".join(str(e.value) for e in (*at.info, *at.warning))
    for name in ("`kind`", "`layer`", "`head`"):
        assert name in notes, (name, notes)
    assert (at.selectbox(key="we_layer").value, at.selectbox(key="we_head").value) == (5, 0)
    assert_live_page(at, 64, causal=False)
    at = open_lecture(monkeypatch, numbers="live", text="")
    assert not at.error and "empty" in " ".join(str(w.value) for w in at.warning)
    assert any(t.startswith("E") for t in chart_titles(at))  # the page's other sections are still drawn
    at = open_lecture(monkeypatch, numbers="everything")
    assert "`numbers`" in " ".join(str(e.value) for e in at.info) and at.radio(key="we_numbers").value == "example"


@needs_ckpt
def test_the_editable_matrices_survive_a_visit_to_the_live_numbers(monkeypatch):
    at = open_lecture(monkeypatch, q="1,0,0;0,1,0;0,0,1")
    at.radio(key="we_numbers").set_value("live").run()
    assert at.query_params["q"] == "1,0,0;0,1,0;0,0,1"
    at.radio(key="we_numbers").set_value("example").run()
    assert not at.exception and at.query_params["q"] == "1,0,0;0,1,0;0,0,1" and "numbers" not in at.query_params
    (scores,) = [
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if json.loads(c.proto.spec)["layout"]["title"]["text"] == "1. Scores QKᵀ"
    ]
    from test_attention_views import z_of

    from teaching.worked import REF_K

    np.testing.assert_allclose(z_of(scores["data"][0]), REF_K.T)  # Q = I: the scores are Kᵀ


@pytest.mark.parametrize("name, causal", [("opus-mt-tiny", False), ("gpt2-tiny", True)])
def test_the_live_numbers_of_hugging_face_folders(monkeypatch, hf_root, name, causal):
    at = open_lecture(monkeypatch, hf_root.path, ckpt=name, numbers="live")
    assert_live_page(at, 4, causal=causal)  # d_model 16, 4 heads: d_k = 4, shown whole
    specs = " ".join(c.proto.spec for c in at.get("plotly_chart"))
    assert "Ġ" not in specs and "\\u0120" not in specs  # GPT-2's stored space mark never reaches a chart
