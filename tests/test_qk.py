"""Inside one head (``reading/qk.py``, ``viz/qk.py``, ``viz/qk_vectors.py``): the query·key numbers are the model's own.

For tiny random models of every kind this project runs (post-LN and pre-LN, encoder-decoder and decoder-only,
sinusoidal, learned, RoPE and ALiBi positions) and the tiny Hugging Face MarianMT and GPT-2 fixtures, every head's
weights for every query equal the traced path's (the Attention page's heatmaps) to 1e-6, the head's output equals
what the module hands Wᴼ, and the parts of a score add up to it. The figures label every key and blank the mask.
"""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
import torch

from model.attention import alibi_slopes, rope_rotate
from reading.qk import QueryKey, attention_module, inspect_query, query_key
from reading.trace import trace_pair
from viz.qk import dimension_order, score_figure, top_dimensions
from viz.qk_vectors import values_figure, vectors_figure

ATOL = 1e-6
#: Every model shape the pages show: (name, config overrides).
CONFIGS = [
    ("post-LN sinusoidal", {}),
    ("pre-LN sinusoidal", {"norm_first": True}),
    ("learned", {"pos_encoding": "learned"}),
    ("rope", {"pos_encoding": "rope"}),
    ("alibi", {"pos_encoding": "alibi", "norm_first": True}),
    ("decoder-only", {"arch": "decoder-only", "n_encoder_layers": 0}),
    ("decoder-only rope", {"arch": "decoder-only", "n_encoder_layers": 0, "pos_encoding": "rope"}),
    ("decoder-only alibi", {"arch": "decoder-only", "n_encoder_layers": 0, "pos_encoding": "alibi"}),
]


class _Pieces:
    """The one tokenizer member :func:`trace_pair` uses, for models without a tokenizer of their own here."""

    @staticmethod
    def tokens(ids):
        return [str(i) for i in ids]


def _pair(model, encode_src, encode_tgt):
    src = encode_src("The cat sleeps.") if model.cfg.is_encoder_decoder else None
    tgt = encode_tgt("Die Katze schläft.")[:-1]  # decoder inputs: <bos> …, without <eos>
    return src, tgt


def _every_record(model, src, tgt):
    """``(kind, layer, head, query, record)`` for every head and query of the model on ``src`` / ``tgt``."""
    trace = trace_pair(model, None, src, tgt)
    for (kind, layer), m in trace.modules.items():
        for head in range(model.cfg.n_heads):
            for query in range(m.x_q.size(0)):
                yield kind, layer, head, query, query_key(trace, kind, layer, head, query)


def _pre_wo_outputs(model, src, tgt) -> dict:
    """What every attention module hands its Wᴼ in the traced forward pass: ``(kind, layer) → [q_len, d_model]``."""
    seen, hooks = {}, []
    for kind, n in model.cfg.attention_layers().items():
        for layer in range(n):
            out_proj = attention_module(model, kind, layer).out_proj
            hooks.append(
                out_proj.register_forward_pre_hook(
                    lambda mod, args, where=(kind, layer): seen.__setitem__(where, args[0][0].clone())
                )
            )
    try:
        trace_pair(model, _Pieces(), src, tgt)
    finally:
        for h in hooks:
            h.remove()
    return seen


def check_against_the_model(model, src, tgt) -> int:
    """Every record of ``model`` against its trace and its modules; returns how many were checked."""
    trace = trace_pair(model, _Pieces(), src, tgt)
    pre_wo = _pre_wo_outputs(model, src, tgt)
    d_k = model.cfg.d_model // model.cfg.n_heads
    checked = 0
    for kind, layer, head, query, rec in _every_record(model, src, tgt):
        row = trace.attention[kind][layer, head, query]
        assert (rec.weights - row).abs().max() <= ATOL, (kind, layer, head, query)
        assert torch.allclose(rec.output, pre_wo[(kind, layer)][query, head * d_k : (head + 1) * d_k], atol=ATOL)
        assert torch.allclose(rec.contributions.sum(-1), rec.scores, atol=1e-5)
        assert torch.allclose(rec.products, rec.q[None] * rec.k, atol=ATOL)
        assert torch.allclose(rec.weighted.sum(0), rec.output, atol=ATOL)
        assert rec.weights.sum().item() == pytest.approx(1.0, abs=1e-5)
        assert (rec.weights[~rec.mask] == 0).all() and torch.isinf(rec.logits[~rec.mask]).all()
        assert torch.isfinite(rec.logits[rec.mask]).all()
        if kind in ("decoder", "self"):  # causal: the keys up to the query's own position
            assert rec.mask.tolist() == [j <= query for j in range(len(rec.mask))]
        assert rec.scale == pytest.approx(1 / math.sqrt(d_k)) and rec.d_k == d_k
        checked += 1
    return checked


@pytest.mark.parametrize("name, overrides", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_every_weight_equals_the_heatmap_and_the_output_what_wo_receives(
    make_model, encode_src, encode_tgt, name, overrides
):
    model = make_model(**overrides)
    src, tgt = _pair(model, encode_src, encode_tgt)
    kinds = len(model.cfg.attention_layers())
    assert check_against_the_model(model, src, tgt) >= kinds * 2 * model.cfg.n_heads * 2


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_module_input_is_what_the_forward_feeds_it_pre_or_post_ln(make_model, encode_src, encode_tgt, norm_first):
    model = make_model(norm_first=norm_first)
    src, tgt = _pair(model, encode_src, encode_tgt)
    inputs = trace_pair(model, None, src, tgt).modules
    with torch.inference_mode():
        x = model.embed_tokens(torch.tensor([src]))[0]
        first = model.encoder_layers[0].res_attn.norm(x) if norm_first else x  # LayerNorm(x) only when pre-LN
        memory, _ = model.encode(torch.tensor([src]))
    assert torch.allclose(inputs[("encoder", 0)].x_q, first, atol=ATOL)
    assert torch.allclose(inputs[("cross", 1)].x_kv, memory[0], atol=ATOL)  # keys and values: the encoder output
    assert inputs[("encoder", 0)].mask.all() and inputs[("cross", 0)].mask.shape == (len(tgt), len(src))


def test_rope_rotates_q_and_k_by_their_positions_and_changes_the_scores(make_model, encode_tgt):
    model = make_model(arch="decoder-only", n_encoder_layers=0, pos_encoding="rope")
    tgt = encode_tgt("Die Katze schläft.")[:-1]
    rec = inspect_query(model, None, tgt, "self", 1, 2, 4)
    assert rec.position == "rope" and rec.query_position == 4
    assert torch.allclose(rec.q, rope_rotate(rec.q_raw[None], torch.tensor([4]))[0], atol=ATOL)
    assert torch.allclose(rec.k, rope_rotate(rec.k_raw, torch.arange(len(tgt))), atol=ATOL)
    assert torch.allclose(rec.scores_unrotated, rec.k_raw @ rec.q_raw * rec.scale, atol=1e-5)
    assert not torch.allclose(rec.scores_unrotated[:4], rec.scores[:4], atol=1e-3)  # the position entered
    assert torch.allclose(rec.q[:2].norm(), rec.q_raw[:2].norm(), atol=1e-5)  # a rotation keeps each pair's length
    plain = inspect_query(make_model(arch="decoder-only", n_encoder_layers=0), None, tgt, "self", 1, 2, 4)
    assert plain.scores_unrotated is None and torch.equal(plain.q, plain.q_raw) and plain.bias is None


def test_alibi_adds_minus_m_times_the_distance(make_model, encode_src, encode_tgt):
    model = make_model(pos_encoding="alibi")
    src, tgt = _pair(model, encode_src, encode_tgt)
    rec = inspect_query(model, src, tgt, "encoder", 0, 3, 2)
    m = float(alibi_slopes(model.cfg.n_heads)[3])
    assert rec.slope == pytest.approx(m)
    assert torch.allclose(rec.bias, -m * (torch.arange(len(src)) - 2).abs().float(), atol=ATOL)
    assert torch.allclose(rec.logits, rec.scores + rec.bias, atol=ATOL)
    cross = inspect_query(model, src, tgt, "cross", 0, 3, 2)  # ALiBi acts in self-attention only
    assert cross.bias is None and cross.slope is None


@pytest.mark.parametrize(
    "call, says",
    [
        (lambda m, s, t: inspect_query(m, s, t, "self", 0, 0, 0), "no 'self' attention"),
        (lambda m, s, t: inspect_query(m, s, t, "cross", 2, 0, 0), "layer 2 is out of range"),
        (lambda m, s, t: inspect_query(m, s, t, "cross", 0, 4, 0), "head 4 is out of range"),
        (lambda m, s, t: inspect_query(m, s, t, "decoder", 0, 0, 99), "query 99 is out of range"),
        (lambda m, s, t: inspect_query(m, None, t, "decoder", 0, 0, 0), "needs src_ids"),
        (lambda m, s, t: inspect_query(m, s, [], "decoder", 0, 0, 0), "at least one input id"),
    ],
)
def test_bad_requests_get_a_clear_message(make_model, encode_src, encode_tgt, call, says):
    model = make_model()
    src, tgt = _pair(model, encode_src, encode_tgt)
    with pytest.raises(ValueError, match=says):
        call(model, src, tgt)


def test_the_record_is_frozen_and_its_tensors_immutable(make_model, encode_src, encode_tgt):
    model = make_model()
    src, tgt = _pair(model, encode_src, encode_tgt)
    rec = inspect_query(model, src, tgt, "cross", 1, 0, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.weights = None
    with pytest.raises(RuntimeError):
        rec.weights.mul_(2)  # an inference tensor: shared by every visitor, it refuses an in-place change
    assert all(
        getattr(rec, f.name).is_inference()
        for f in dataclasses.fields(QueryKey)
        if isinstance(getattr(rec, f.name), torch.Tensor)
    )


# --- the Hugging Face fixtures --------------------------------------------------------------------------------------
def test_marian_and_gpt2_heads_equal_their_traces(hf_models):
    marian, gpt2 = hf_models.marian, hf_models.gpt2
    src = [5, 9, 14, 20, 31, 0]  # Marian: </s> = 0 ends the source; the decoder starts from <pad>
    # 2 layers × 4 heads × (6 encoder queries + 4 decoder + 4 cross)
    assert check_against_the_model(marian, src, [marian.cfg.bos_id, 7, 8, 9]) == 2 * 4 * (6 + 4 + 4)
    assert check_against_the_model(gpt2, None, [100, 5, 6, 7, 8, 9]) == 2 * 4 * 6


# --- the figures ---------------------------------------------------------------------------------------------------
def _figure_record(make_model, encode_src, encode_tgt, **overrides):
    model = make_model(**overrides)
    src, tgt = _pair(model, encode_src, encode_tgt)
    kind = "decoder" if model.cfg.is_encoder_decoder else "self"
    return inspect_query(model, src, tgt, kind, 1, 0, 2), len(tgt)


def test_score_figure_labels_every_key_blanks_the_mask_and_draws_the_weights(make_model, encode_src, encode_tgt):
    rec, n = _figure_record(make_model, encode_src, encode_tgt)
    labels = [f"▁k{j}" for j in range(n)]
    contributions, mask = rec.contributions.numpy(), rec.mask.numpy()
    fig = score_figure(
        contributions,
        rec.scores.numpy(),
        rec.weights.numpy(),
        labels,
        mask=mask,
        own=2,
        title="How “k2” scores every key",
    )
    heat, scores, *rest = fig.data
    weights = next(t for t in fig.data if t.name == "weight")
    assert list(fig.layout.yaxis.ticktext) == ["▁k0", "▁k1", "<b>▁k2</b>"] + labels[3:]
    z = np.asarray(heat.z, dtype=float)
    assert np.isnan(z[~mask]).all() and np.allclose(z[mask], contributions[mask], atol=1e-6)
    assert np.allclose(np.asarray(weights.x), rec.weights.numpy(), atol=1e-7)
    assert [t for t in scores.text if t] == [f"{v:+.2f}" for v in rec.scores.numpy()[mask]]
    masked_note = next(t for t in fig.data if t.name == "masked")
    assert list(masked_note.y) == [j for j in range(n) if not mask[j]]
    (band, *_), first = fig.layout.shapes, int(np.argmin(mask))  # the causal mask: one grey band in each panel
    assert len(fig.layout.shapes) == 3 and (band.y0, band.y1) == (first - 0.5, n - 0.5)
    bound = np.nanmax(np.abs(z))
    assert heat.zmin == pytest.approx(-bound) and heat.zmax == pytest.approx(bound) and heat.zmid == 0


def test_sorting_draws_the_dimensions_by_their_part(make_model, encode_src, encode_tgt):
    rec, n = _figure_record(make_model, encode_src, encode_tgt)
    c, mask = rec.contributions.numpy(), rec.mask.numpy()
    order = dimension_order(c, mask)
    size = np.abs(c[mask]).mean(0)
    assert sorted(order) == list(range(c.shape[1])) and list(size[order]) == sorted(size, reverse=True)
    assert list(dimension_order(c, mask, sort=False)) == list(range(c.shape[1]))
    fig = score_figure(c, rec.scores.numpy(), rec.weights.numpy(), [str(j) for j in range(n)], mask=mask, order=order)
    assert np.allclose(np.asarray(fig.data[0].z)[mask], c[mask][:, order], atol=1e-6)
    assert fig.layout.xaxis.ticktext[0] == str(order[0]) and "sorted" in fig.layout.xaxis.title.text
    assert top_dimensions(c[0], 2) == [(int(d), float(c[0, d])) for d in np.argsort(-np.abs(c[0]))[:2]]


def test_rope_and_alibi_markers_and_the_vector_panels(make_model, encode_src, encode_tgt):
    rope, n = _figure_record(
        make_model, encode_src, encode_tgt, arch="decoder-only", n_encoder_layers=0, pos_encoding="rope"
    )
    labels = [str(j) for j in range(n)]
    fig = score_figure(
        rope.contributions.numpy(),
        rope.scores.numpy(),
        rope.weights.numpy(),
        labels,
        mask=rope.mask.numpy(),
        unrotated=rope.scores_unrotated.numpy(),
    )
    ring = next(t for t in fig.data if t.name == "without RoPE's rotation")
    assert np.allclose(np.asarray(ring.x, dtype=float)[:3], rope.scores_unrotated.numpy()[:3], atol=1e-6)
    panels = vectors_figure(
        [("before", rope.q_raw.numpy(), rope.k_raw.numpy()), ("after", rope.q.numpy(), rope.k.numpy())], "2", labels
    )
    assert len(panels.data) == 4  # q over the keys, twice
    assert np.allclose(np.asarray(panels.data[3].z), rope.k.numpy(), atol=1e-6)
    assert list(panels.layout.yaxis.ticktext) == ["q · 2"] and list(panels.layout.yaxis3.ticktext) == labels
    alibi, _ = _figure_record(make_model, encode_src, encode_tgt, pos_encoding="alibi")
    fig = score_figure(
        alibi.contributions.numpy(),
        alibi.scores.numpy(),
        alibi.weights.numpy(),
        labels,
        mask=alibi.mask.numpy(),
        bias=alibi.bias.numpy(),
    )
    diamond = next(t for t in fig.data if t.name == "+ ALiBi bias = logit")
    seen = alibi.mask.numpy()
    assert np.allclose(np.asarray(diamond.x, dtype=float)[seen], alibi.logits.numpy()[seen], atol=1e-6)


def test_values_figure_puts_the_output_over_the_weighted_values(make_model, encode_src, encode_tgt):
    rec, n = _figure_record(make_model, encode_src, encode_tgt)
    fig = values_figure(rec.weighted.numpy(), rec.output.numpy(), [str(j) for j in range(n)])
    assert np.allclose(np.asarray(fig.data[0].z)[0], rec.output.numpy(), atol=1e-7)
    assert np.allclose(np.asarray(fig.data[1].z), rec.weighted.numpy(), atol=1e-7)
    assert list(fig.layout.yaxis.ticktext) == ["output"]


def test_the_figures_refuse_shapes_that_do_not_agree():
    with pytest.raises(ValueError, match="one entry per key"):
        score_figure(np.zeros((3, 4)), np.zeros(3), np.zeros(2), ["a", "b", "c"])
    with pytest.raises(ValueError, match="every panel"):
        vectors_figure([("x", np.zeros(4), np.zeros((2, 4)))], "q", ["a", "b", "c"])
    with pytest.raises(ValueError, match="weighted must be"):
        values_figure(np.zeros((2, 4)), np.zeros(3), ["a", "b"])


def test_the_npz_export_round_trips(make_model, encode_src, encode_tgt):
    from app_pages.attention.qk import record_npz

    rec, n = _figure_record(make_model, encode_src, encode_tgt, pos_encoding="rope")
    data = np.load(io.BytesIO(record_npz(rec, "k2", [f"k{j}" for j in range(n)])))
    assert np.allclose(data["weights"], rec.weights.numpy()) and np.allclose(data["q_raw"], rec.q_raw.numpy())
    assert data["mask"].dtype == bool and "bias" not in data and "scores_unrotated" in data
    assert str(data["query_token"]) == "k2" and list(data["key_tokens"]) == [f"k{j}" for j in range(n)]


def test_the_colours_are_stops_that_draw_alike_with_and_without_validation(monkeypatch):
    """The served app builds figures without Plotly's validation (viz.theme.figure), and then a scale *name* reaches
    plotly.js, whose "RdBu" is another scale (blue, grey, red): the figures carry the stops themselves."""
    monkeypatch.setenv("ATTENTION_EXPLORER_VALIDATE_FIGURES", "0")
    c = np.array([[1.0, -1.0], [0.5, 0.0]])
    figs = [
        score_figure(c, c.sum(1), np.array([0.6, 0.4]), ["a", "b"]),
        vectors_figure([("x", c[0], c)], "q", ["a", "b"]),
        values_figure(c, c.sum(0), ["a", "b"]),
    ]
    for fig in figs:
        for trace in fig.to_dict()["data"]:
            if trace["type"] == "heatmap":
                scale = [list(stop) for stop in trace["colorscale"]]
                assert scale[0] == [0.0, "rgb(5,48,97)"] and scale[-1] == [1.0, "rgb(103,0,31)"]  # blue → red
                assert not trace.get("reversescale")
