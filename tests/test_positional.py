"""Sinusoidal positional encoding (Vaswani et al. 2017, §3.5, base 10000) and the PositionalEncoding module."""

from __future__ import annotations

import math

import pytest
import torch

from model.positional import PositionalEncoding, sinusoidal_table


def test_reference_row_pos1_d8():
    table = sinusoidal_table(2, 8)
    assert table.shape == (2, 8) and table.dtype == torch.float32
    expected = torch.tensor([0.8415, 0.5403, 0.0998, 0.9950, 0.0100, 0.99995, 0.0010, 1.0000])
    torch.testing.assert_close(table[1], expected, atol=1e-4, rtol=0)
    # Position 0: sin 0 = 0 in even columns, cos 0 = 1 in odd columns.
    assert table[0, 0::2].tolist() == [0.0] * 4
    assert table[0, 1::2].tolist() == [1.0] * 4


def test_matches_formula_with_base_10000():
    d, n = 16, 50
    table = sinusoidal_table(n, d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_halves_layout_is_the_same_columns_regrouped():
    """Marian's layout: the interleaved table's sine columns first, then its cosine columns."""
    interleaved = sinusoidal_table(40, 12)
    halves = sinusoidal_table(40, 12, layout="halves")
    assert torch.equal(halves, torch.cat([interleaved[:, 0::2], interleaved[:, 1::2]], dim=1))
    with pytest.raises(ValueError, match="layout"):
        sinusoidal_table(4, 8, layout="spiral")


def _rotation(k: int, d_model: int) -> torch.Tensor:
    """Block-diagonal ``[d, d]`` map M_k with PE(pos + k) = M_k · PE(pos), built from the frequencies.

    For one (sin, cos) pair at frequency w: sin((p+k)w) = sin(pw)cos(kw) + cos(pw)sin(kw) and
    cos((p+k)w) = cos(pw)cos(kw) − sin(pw)sin(kw).
    """
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = 1.0 / 10000 ** (2 * i / d_model)
        c, s = math.cos(k * w), math.sin(k * w)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    return m


@pytest.mark.parametrize("k", [1, 3, 10])
def test_shift_is_a_fixed_linear_map(k):
    d = 16
    table = sinusoidal_table(64, d).double()
    m = _rotation(k, d)
    for pos in (0, 1, 5, 20, 40, 53):
        torch.testing.assert_close(m @ table[pos], table[pos + k], atol=1e-5, rtol=0)
    # The same map for every position, but a different one for a different shift.
    assert not torch.allclose(_rotation(k + 1, d) @ table[5], table[5 + k], atol=1e-3)
    # Rotation blocks keep each pair's norm (sin² + cos² = 1).
    pair_norms = table.view(64, d // 2, 2).pow(2).sum(-1)
    torch.testing.assert_close(pair_norms, torch.ones_like(pair_norms), atol=1e-6, rtol=0)


@pytest.mark.parametrize("d_model", [7, 1, 33])
def test_odd_d_model_raises(d_model):
    with pytest.raises(ValueError, match="even"):
        sinusoidal_table(10, d_model)


@pytest.mark.parametrize("max_len,d_model", [(0, 8), (4, 0), (-1, 8)])
def test_non_positive_sizes_raise(max_len, d_model):
    with pytest.raises(ValueError):
        sinusoidal_table(max_len, d_model)


@pytest.mark.parametrize("offset", [0, 1, 5, 13])
def test_module_with_offset_adds_table_slice(offset):
    pe = PositionalEncoding("sinusoidal", 20, 8)
    x = torch.randn(2, 7, 8)
    out = pe(x, offset=offset)
    torch.testing.assert_close(out - x, sinusoidal_table(20, 8)[offset : offset + 7].expand(2, 7, 8), atol=1e-6, rtol=0)


def test_module_offset_is_consistent_with_full_sequence():
    """Adding positions one at a time with an offset equals adding them to the whole sequence (cached decoding)."""
    for kind in ("sinusoidal", "learned"):
        torch.manual_seed(0)
        pe = PositionalEncoding(kind, 16, 8)
        x = torch.randn(1, 10, 8)
        full = pe(x)
        steps = torch.cat([pe(x[:, t : t + 1], offset=t) for t in range(10)], dim=1)
        torch.testing.assert_close(steps, full, atol=0, rtol=0)


def test_module_too_long_raises():
    pe = PositionalEncoding("sinusoidal", 8, 4)
    pe(torch.zeros(1, 8, 4))  # exactly max_len is fine
    with pytest.raises(ValueError, match="max_len"):
        pe(torch.zeros(1, 9, 4))
    with pytest.raises(ValueError, match="max_len"):
        pe(torch.zeros(1, 1, 4), offset=8)


def test_module_kinds():
    x = torch.randn(1, 3, 8)
    assert torch.equal(PositionalEncoding("none", 10, 8)(x), x)
    learned = PositionalEncoding("learned", 10, 8)
    assert isinstance(learned.table, torch.nn.Parameter) and learned.table.requires_grad
    sin = PositionalEncoding("sinusoidal", 10, 8)
    assert not any(True for _ in sin.parameters())  # a fixed buffer, not trained
    assert "table" not in sin.state_dict()  # and not stored in checkpoints (rebuilt from the config)
    with pytest.raises(ValueError):
        PositionalEncoding("fourier", 10, 8)
    assert PositionalEncoding("rope", 10, 8).table is None  # RoPE and ALiBi act inside attention
    assert PositionalEncoding("alibi", 10, 8).table is None


# --- RoPE and ALiBi (Su et al. 2021; Press et al. 2021) ---------------------------------------------------------
def test_rope_makes_scores_depend_only_on_the_offset():
    from model.attention import rope_rotate

    torch.manual_seed(0)
    q, k = torch.randn(16), torch.randn(16)

    def score(i: int, j: int) -> float:
        qi = rope_rotate(q[None], torch.tensor([i]))[0]
        kj = rope_rotate(k[None], torch.tensor([j]))[0]
        return float(qi @ kj)

    for offset in (0, 1, 5):
        values = [score(p + offset, p) for p in (0, 3, 17, 40)]
        assert max(values) - min(values) < 1e-4, values
    assert abs(score(6, 1) - score(2, 1)) > 1e-3  # a different offset gives a different score
    # A rotation keeps the norm, and position 0 is the identity.
    assert torch.allclose(rope_rotate(q[None], torch.tensor([7]))[0].norm(), q.norm(), atol=1e-5)
    assert torch.allclose(rope_rotate(q[None], torch.tensor([0]))[0], q)


def test_alibi_slopes_and_bias_follow_the_paper():
    from model.attention import alibi_bias, alibi_slopes

    slopes = alibi_slopes(8)
    assert slopes.tolist() == pytest.approx([2**-1, 2**-2, 2**-3, 2**-4, 2**-5, 2**-6, 2**-7, 2**-8])
    assert alibi_slopes(4).tolist() == pytest.approx([2**-2, 2**-4, 2**-6, 2**-8])
    bias = alibi_bias(slopes, torch.arange(3), torch.arange(3))
    assert bias.shape == (8, 3, 3)
    assert torch.allclose(bias[0], torch.tensor([[0, -0.5, -1.0], [-0.5, 0, -0.5], [-1.0, -0.5, 0]]))
    assert bias[1, 2, 0] == pytest.approx(-2 * 2**-2)
