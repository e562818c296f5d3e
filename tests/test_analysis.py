"""Rollout, head statistics, word merging and ablation on hand-computed or synthetic cases."""

import math

import pytest
import torch

from reading.analysis import (
    ablation_sweep,
    attention_rollout,
    head_statistics,
    merge_words,
    sequence_log_probs,
    word_ids,
)


def test_rollout_matches_a_hand_computed_three_token_example():
    a1 = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    a2 = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    weights = torch.stack([a1, a2])[:, None]  # [2 layers, 1 head, 3, 3]
    # Â = 0.5·A + 0.5·I (rows already sum to 1), R = Â2 · Â1, computed by hand:
    h1 = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.1, 0.15, 0.75]])
    h2 = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    expected = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.55, 0.075, 0.375]])
    assert torch.allclose(h2 @ h1, expected)
    rollout = attention_rollout(weights)
    assert torch.allclose(rollout, expected, atol=1e-6)
    assert torch.allclose(rollout.sum(-1), torch.ones(3))


def test_rollout_refuses_cross_attention_shapes():
    with pytest.raises(ValueError):
        attention_rollout(torch.full((2, 1, 3, 4), 0.25))


def test_head_statistics_on_synthetic_heads():
    n = 4
    identity = torch.eye(n)
    previous = torch.zeros(n, n)
    previous[0, 0] = 1.0
    previous[torch.arange(1, n), torch.arange(0, n - 1)] = 1.0
    uniform = torch.full((n, n), 1.0 / n)
    first = torch.zeros(n, n)
    first[:, 0] = 1.0
    w = torch.stack([identity, previous, uniform, first])[None]  # [1 layer, 4 heads, n, n]
    stats = head_statistics(w, eos_index=n - 1)
    assert stats["same"][0].tolist() == pytest.approx([1.0, 0.25, 0.25, 0.25])
    assert stats["previous"][0].tolist() == pytest.approx([0.0, 1.0, 0.25, 1 / 3])
    assert stats["first"][0].tolist() == pytest.approx([0.25, 0.5, 0.25, 1.0])
    assert stats["eos"][0].tolist() == pytest.approx([0.25, 0.0, 0.25, 0.0])
    assert stats["entropy"][0].tolist() == pytest.approx([0.0, 0.0, math.log(n), 0.0], abs=1e-6)
    assert stats["max"][0].tolist() == pytest.approx([1.0, 1.0, 0.25, 1.0])


def test_word_ids_follow_the_word_start_marker():
    assert word_ids(["▁Bob", "by", "▁likes", "▁black", "berries", ".", "<eos>"]) == [0, 0, 1, 2, 2, 2, 3]
    assert word_ids(["<bos>", "Das", "▁ist"]) == [0, 1, 2]


def test_merge_words_conserves_each_row_and_sums_keys():
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(2, 3, 5, 6), dim=-1)  # [layers, heads, q, k]
    q_words, k_words = [0, 0, 1, 2, 2], [0, 1, 1, 1, 2, 3]
    merged = merge_words(w, q_words, k_words)
    assert merged.shape == (2, 3, 3, 4)
    assert torch.allclose(merged.sum(-1), torch.ones(2, 3, 3), atol=1e-6)
    # Key word 1 = pieces 1..3 summed; query word 0 = mean of pieces 0 and 1.
    expected = (w[..., 0:2, 1:4].sum(-1)).mean(-1)
    assert torch.allclose(merged[..., 0, 1], expected, atol=1e-6)


def test_ablating_one_head_changes_only_that_heads_contribution(make_model, encode_src, encode_tgt):
    model = make_model()
    src, tgt = encode_src("the cat sat"), encode_tgt("die katze sass")
    base = sequence_log_probs(model, src, tgt)
    mask = torch.ones(model.cfg.n_decoder_layers, model.cfg.n_heads)
    assert torch.allclose(sequence_log_probs(model, src, tgt, {"cross": mask}), base)  # all-ones = no change
    mask[1, 2] = 0.0
    ablated = sequence_log_probs(model, src, tgt, {"cross": mask})
    assert not torch.allclose(ablated, base)
    # Same as zeroing that head's value rows (its output before Wᴼ) in the last layer's cross-attention.
    layer = model.decoder_layers[1].cross_attn
    d_k = model.cfg.d_k
    with torch.no_grad():
        saved_w, saved_b = layer.v_proj.weight.clone(), layer.v_proj.bias.clone()
        layer.v_proj.weight[2 * d_k : 3 * d_k] = 0.0
        layer.v_proj.bias[2 * d_k : 3 * d_k] = 0.0
        try:
            assert torch.allclose(sequence_log_probs(model, src, tgt), ablated, atol=1e-5)
        finally:
            layer.v_proj.weight.copy_(saved_w)
            layer.v_proj.bias.copy_(saved_b)


def test_ablation_sweep_covers_every_head(make_model, encode_src, encode_tgt):
    model = make_model()
    sweep = ablation_sweep(model, encode_src("the cat"), encode_tgt("die katze"))
    cfg = model.cfg
    assert set(sweep) == {"encoder", "decoder", "cross"}
    assert sweep["encoder"].shape == (cfg.n_encoder_layers, cfg.n_heads)
    assert sweep["cross"].abs().sum() > 0
    lm = make_model(arch="decoder-only")
    assert set(ablation_sweep(lm, None, encode_tgt("the cat sat"))) == {"self"}
