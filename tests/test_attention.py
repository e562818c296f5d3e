"""Multi-head attention: agreement with torch.nn.MultiheadAttention, fast vs traced path, worked examples,
head ablation. Our masks use True = "may attend"; torch's boolean masks use True = "may NOT attend"."""

from __future__ import annotations

import math

import pytest
import torch

from model.attention import LayerKV, MultiHeadAttention, scaled_dot_product_weights
from model.transformer import causal_mask

D_MODEL, N_HEADS = 32, 4
ATOL = 1e-5


def _pair(seed: int = 0) -> tuple[MultiHeadAttention, torch.nn.MultiheadAttention]:
    """Our module and torch's, with identical weights (q/k/v copied from torch's packed in_proj)."""
    torch.manual_seed(seed)
    ref = torch.nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True).eval()
    with torch.no_grad():
        # torch initialises the in_proj bias to zero: give it values so that a bias mix-up would show.
        ref.in_proj_bias.normal_(0, 0.1)
        ref.out_proj.bias.normal_(0, 0.1)
    ours = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    wq, wk, wv = ref.in_proj_weight.detach().chunk(3, dim=0)
    bq, bk, bv = ref.in_proj_bias.detach().chunk(3, dim=0)
    with torch.no_grad():
        for lin, w, b in ((ours.q_proj, wq, bq), (ours.k_proj, wk, bk), (ours.v_proj, wv, bv)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        ours.out_proj.weight.copy_(ref.out_proj.weight)
        ours.out_proj.bias.copy_(ref.out_proj.bias)
    return ours, ref


def _key_padding(lengths: list[int], k_len: int) -> torch.Tensor:
    """Bool ``[batch, k_len]``, True = real key."""
    return torch.arange(k_len)[None, :] < torch.tensor(lengths)[:, None]


MASK_CASES = ["none", "padding", "causal", "padding+causal"]


def _masks(case: str, q_len: int, k_len: int, lengths: list[int]):
    """``(ours [b|1, 1, q|1, k] or None, torch_key_padding_mask or None, torch_attn_mask or None)``."""
    ours, kpm, am = None, None, None
    if "padding" in case:
        ok = _key_padding(lengths, k_len)
        ours = ok[:, None, None, :]
        kpm = ~ok
    if "causal" in case:
        c = causal_mask(q_len, k_len)
        ours = c[None, None] if ours is None else ours & c[None, None]
        am = ~c
    return ours, kpm, am


@pytest.mark.parametrize("trace", [True, False], ids=["traced", "fast"])
@pytest.mark.parametrize("case", MASK_CASES)
def test_self_attention_matches_torch(case, trace):
    ours, ref = _pair()
    x = torch.randn(3, 7, D_MODEL)
    lengths = [7, 5, 3]
    mask, kpm, am = _masks(case, 7, 7, lengths)
    with torch.no_grad():
        out, w = ours(x, x, mask, trace=trace)
        ref_out, ref_w = ref(x, x, x, key_padding_mask=kpm, attn_mask=am, need_weights=True, average_attn_weights=False)
        _, ref_w_avg = ref(x, x, x, key_padding_mask=kpm, attn_mask=am, need_weights=True, average_attn_weights=True)
    assert out.shape == (3, 7, D_MODEL)
    torch.testing.assert_close(out, ref_out, atol=ATOL, rtol=0)
    if trace:
        assert w.shape == (3, N_HEADS, 7, 7)
        torch.testing.assert_close(w, ref_w, atol=ATOL, rtol=0)
        torch.testing.assert_close(w.mean(dim=1), ref_w_avg, atol=ATOL, rtol=0)
    else:
        assert w is None


@pytest.mark.parametrize("trace", [True, False], ids=["traced", "fast"])
@pytest.mark.parametrize("padding", [False, True])
def test_cross_attention_matches_torch(padding, trace):
    """Queries and keys of different lengths (decoder over encoder memory)."""
    ours, ref = _pair(seed=1)
    xq, xkv = torch.randn(2, 4, D_MODEL), torch.randn(2, 6, D_MODEL)
    ok = _key_padding([6, 2], 6)
    with torch.no_grad():
        out, w = ours(xq, xkv, ok[:, None, None, :] if padding else None, trace=trace)
        ref_out, ref_w = ref(
            xq, xkv, xkv, key_padding_mask=~ok if padding else None, need_weights=True, average_attn_weights=False
        )
    torch.testing.assert_close(out, ref_out, atol=ATOL, rtol=0)
    if trace:
        assert w.shape == (2, N_HEADS, 4, 6)
        torch.testing.assert_close(w, ref_w, atol=ATOL, rtol=0)
        if padding:
            assert torch.all(w[1, :, :, 2:] == 0)


@pytest.mark.parametrize("case", MASK_CASES)
def test_traced_path_equals_fast_path(case):
    torch.manual_seed(3)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(3, 9, D_MODEL)
    mask, _, _ = _masks(case, 9, 9, [9, 4, 1])
    with torch.no_grad():
        fast, w_fast = mha(x, x, mask, trace=False)
        traced, w = mha(x, x, mask, trace=True)
    assert w_fast is None
    torch.testing.assert_close(traced, fast, atol=ATOL, rtol=0)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, N_HEADS, 9), atol=1e-6, rtol=0)


def test_weights_are_rows_queries_columns_keys():
    """Causal weights are lower-triangular: row i (query i) puts zero weight on keys j > i."""
    torch.manual_seed(4)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(1, 5, D_MODEL)
    with torch.no_grad():
        _, w = mha(x, x, causal_mask(5, 5)[None, None], trace=True)
    upper = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    assert torch.all(w[0][:, upper] == 0)
    assert torch.all(w[0][:, ~upper] > 0)
    torch.testing.assert_close(w[0, :, 0, 0], torch.ones(N_HEADS))  # the first query sees only itself


# --- reference worked examples ------------------------------------------------------------------------------
Q = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]])
K = torch.tensor([[0.2, 0.2, 0.1], [0.3, 0.4, 0.1], [0.7, 0.2, 0.6]])
V = torch.tensor([[0.3, 0.3, 0.1], [0.2, 0.1, 0.5], [0.6, 0.2, 0.3]])
E = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]])


def test_worked_example_scaled_dot_product():
    w = scaled_dot_product_weights(Q, K)
    torch.testing.assert_close(w[0], torch.tensor([0.3173, 0.3266, 0.3561]), atol=1e-4, rtol=0)
    torch.testing.assert_close((w @ V)[0], torch.tensor([0.3742, 0.1991, 0.3019]), atol=1e-4, rtol=0)
    torch.testing.assert_close(w.sum(-1), torch.ones(3), atol=1e-6, rtol=0)
    # Independent recomputation of all rows: softmax(Q Kᵀ / √3).
    torch.testing.assert_close(w, torch.softmax(Q @ K.T / math.sqrt(3), dim=-1), atol=1e-6, rtol=0)


def test_worked_example_causal_mask_on_scores():
    expected = torch.tensor([[1.0, 0.0, 0.0], [0.4750, 0.5250, 0.0], [0.3006, 0.3322, 0.3672]])
    mask = causal_mask(3, 3)
    assert mask.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # Direct: softmax over the masked raw scores E (no scaling).
    direct = torch.softmax(E.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(direct, expected, atol=1e-4, rtol=0)
    # Through our function: q = E·√d with k = I gives q kᵀ / √d = E.
    w = scaled_dot_product_weights(E * math.sqrt(3), torch.eye(3), mask)
    torch.testing.assert_close(w, expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(w.sum(-1), torch.ones(3), atol=1e-6, rtol=0)
    assert torch.all(w[~mask] == 0)  # exactly zero, not just small
    assert torch.all(w[mask] > 0)


def test_scaled_dot_product_weights_batched_shapes():
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8)
    w = scaled_dot_product_weights(q, k, _key_padding([7, 3], 7)[:, None, None, :])
    assert w.shape == (2, 4, 5, 7)
    assert torch.all(w[1, ..., 3:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 5), atol=1e-6, rtol=0)


# --- head ablation --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("trace", [True, False], ids=["traced", "fast"])
@pytest.mark.parametrize("head", [0, 2])
def test_head_mask_equals_zeroed_value_projection(head, trace):
    torch.manual_seed(5)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    with torch.no_grad():
        mha.v_proj.bias.normal_(0, 0.5)  # a zero bias would make half of the check vacuous
    x = torch.randn(2, 6, D_MODEL)
    mask = causal_mask(6, 6)[None, None]
    head_mask = torch.ones(N_HEADS)
    head_mask[head] = 0
    with torch.no_grad():
        full, _ = mha(x, x, mask, trace=trace)
        ablated, w_ablated = mha(x, x, mask, trace=trace, head_mask=head_mask)
        zeroed = MultiHeadAttention(D_MODEL, N_HEADS).eval()
        zeroed.load_state_dict(mha.state_dict())
        sl = slice(head * mha.d_k, (head + 1) * mha.d_k)
        zeroed.v_proj.weight[sl] = 0
        zeroed.v_proj.bias[sl] = 0
        expected, w_expected = zeroed(x, x, mask, trace=trace)
    torch.testing.assert_close(ablated, expected, atol=ATOL, rtol=0)
    assert (ablated - full).abs().max() > 1e-3  # the head did contribute
    if trace:  # the weights themselves are not changed by ablating the head's output
        torch.testing.assert_close(w_ablated, w_expected, atol=ATOL, rtol=0)


def test_head_mask_all_ones_is_identity():
    torch.manual_seed(6)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(1, 4, D_MODEL)
    with torch.no_grad():
        a, _ = mha(x, x)
        b, _ = mha(x, x, head_mask=torch.ones(N_HEADS))
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(30, 4)


# --- cache at module level --------------------------------------------------------------------------------------
def test_self_attention_cache_appends_rows_and_matches_full():
    torch.manual_seed(7)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(1, 5, D_MODEL)
    with torch.no_grad():
        full, _ = mha(x, x, causal_mask(5, 5)[None, None])
        cache = LayerKV()
        rows = []
        for t in range(5):
            step = x[:, t : t + 1]
            out, _ = mha(step, step, None, cache=cache)  # one query sees every cached key: causal by construction
            rows.append(out)
            assert cache.positions == t + 1
    torch.testing.assert_close(torch.cat(rows, dim=1), full, atol=ATOL, rtol=0)
    assert cache.nbytes() == 2 * 1 * N_HEADS * 5 * (D_MODEL // N_HEADS) * 4
    cache.truncate(2)
    assert cache.positions == 2


def test_static_cache_reuses_memory_kv():
    torch.manual_seed(8)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    q, mem = torch.randn(1, 1, D_MODEL), torch.randn(1, 6, D_MODEL)
    with torch.no_grad():
        cache = LayerKV()
        first, _ = mha(q, mem, cache=cache, static_kv=True)
        again, _ = mha(q, None, cache=cache, static_kv=True)  # memory not needed once cached
        direct, _ = mha(q, mem)
    assert cache.positions == 6
    torch.testing.assert_close(first, direct, atol=ATOL, rtol=0)
    torch.testing.assert_close(again, direct, atol=ATOL, rtol=0)
    with pytest.raises(ValueError):
        mha(q, None)
