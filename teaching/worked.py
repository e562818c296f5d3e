"""Small worked examples for the lecture page, in float64 NumPy (no Streamlit, no model weights).

Formulas:

* Scaled dot-product attention, Vaswani et al. (2017) §3.2.1: ``softmax(Q Kᵀ / √d_k) V``, softmax over each
  **row** (each query's weights over the keys sum to 1); the causal mask sets keys after the query to −∞.
* Layer normalisation, Ba et al. (2016): per token over the feature axis,
  ``y = γ ⊙ (x − mean) / √(var + ε) + β`` with the biased variance (as ``torch.nn.LayerNorm``).
* Multi-head split/concat, Vaswani et al. §3.2.2: ``[seq, d_model] → [heads, seq, d_k] → [seq, d_model]``.
* Sinusoidal positions, §3.5 (base 10000) and the linear-map property: for every offset ``k`` there is a
  block-diagonal rotation ``M_k`` with ``M_k · PE(pos) = PE(pos + k)`` for all ``pos``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from model.positional import sinusoidal_table

#: The seed articles' 3×3 example (rows = tokens).
REF_Q = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]])
REF_K = np.array([[0.2, 0.2, 0.1], [0.3, 0.4, 0.1], [0.7, 0.2, 0.6]])
REF_V = np.array([[0.3, 0.3, 0.1], [0.2, 0.1, 0.5], [0.6, 0.2, 0.3]])
#: Scores for the causal-mask example (used without scaling).
REF_CAUSAL_SCORES = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]])


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis (each row sums to 1); ``-inf`` entries get weight 0. Shape kept."""
    s = np.asarray(scores, dtype=float)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def causal_mask(q_len: int, k_len: int) -> np.ndarray:
    """``[q_len, k_len]`` bool, True where the key may be seen (key ≤ query; queries are the last positions)."""
    return ~np.triu(np.ones((q_len, k_len), dtype=bool), k=1 + k_len - q_len)


def attention_steps(q, k, v, scale: bool = True, causal: bool = False) -> dict[str, np.ndarray]:
    """Every intermediate of ``softmax(Q Kᵀ / √d_k [+ mask]) V`` (Vaswani et al. §3.2.1).

    Args:
        q: ``[n_q, d_k]``; k: ``[n_k, d_k]``; v: ``[n_k, d_v]``.
        scale: divide by ``√d_k``; causal: mask keys after each query with ``−∞``.

    Returns:
        ``scores`` = QKᵀ ``[n_q, n_k]``, ``scaled``, ``masked`` (−∞ where hidden), ``weights`` (rows sum to 1),
        ``output`` ``[n_q, d_v]``.

    Raises:
        ValueError: shapes that do not fit, or non-finite inputs.
    """
    q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError("Q, K and V must be matrices")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"Q and K need the same width d_k, got {q.shape[1]} and {k.shape[1]}")
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"K and V need the same number of rows, got {k.shape[0]} and {v.shape[0]}")
    if not (np.isfinite(q).all() and np.isfinite(k).all() and np.isfinite(v).all()):
        raise ValueError("every entry must be a finite number")
    scores = q @ k.T
    scaled = scores / math.sqrt(q.shape[1]) if scale else scores.copy()
    masked = np.where(causal_mask(*scaled.shape), scaled, -np.inf) if causal else scaled.copy()
    weights = softmax_rows(masked)
    return {"scores": scores, "scaled": scaled, "masked": masked, "weights": weights, "output": weights @ v}


def layer_norm_steps(x, gamma, beta, eps: float = 1e-5) -> dict[str, np.ndarray]:
    """LayerNorm per row of ``x [seq, d_model]`` (Ba et al. 2016; biased variance, as ``torch.nn.LayerNorm``).

    Returns ``mean`` and ``var`` ``[seq]``, ``normalised`` and ``output`` ``[seq, d_model]``.
    Raises ``ValueError`` when γ/β are not of length ``d_model`` or values are not finite.
    """
    x, gamma, beta = (np.asarray(a, dtype=float) for a in (x, gamma, beta))
    if x.ndim != 2:
        raise ValueError("x must be a matrix [seq, d_model]")
    gamma, beta = gamma.reshape(-1), beta.reshape(-1)
    if gamma.size != x.shape[1] or beta.size != x.shape[1]:
        raise ValueError(f"γ and β need length d_model = {x.shape[1]}")
    if not (np.isfinite(x).all() and np.isfinite(gamma).all() and np.isfinite(beta).all()):
        raise ValueError("every entry must be a finite number")
    mean = x.mean(axis=1)
    var = x.var(axis=1)
    normalised = (x - mean[:, None]) / np.sqrt(var[:, None] + eps)
    return {"mean": mean, "var": var, "normalised": normalised, "output": normalised * gamma + beta}


def split_heads(x, n_heads: int) -> np.ndarray:
    """``[seq, d_model] → [heads, seq, d_k]`` with ``d_k = d_model / heads`` (head h takes columns h·d_k…)."""
    x = np.asarray(x, dtype=float)
    seq, d_model = x.shape
    if n_heads <= 0 or d_model % n_heads:
        raise ValueError(f"d_model {d_model} is not divisible by {n_heads} heads")
    return x.reshape(seq, n_heads, d_model // n_heads).transpose(1, 0, 2)


def concat_heads(h: np.ndarray) -> np.ndarray:
    """``[heads, seq, d_k] → [seq, heads·d_k]``: the inverse of :func:`split_heads`."""
    heads, seq, d_k = h.shape
    return np.asarray(h).transpose(1, 0, 2).reshape(seq, heads * d_k)


#: The head sizes of the √d_k demonstration: powers of two, evenly spaced on its log axis.
SCALING_D_KS = tuple(2**i for i in range(11))  # 1 … 1024


def scaling_demo(d_ks=SCALING_D_KS, n_keys: int = 10, n_draws: int = 20_000, seed: int = 0) -> list[dict]:
    """Why divide by √d_k (Vaswani et al. §3.2.1, footnote 4), as expectations, not one noisy draw.

    With the entries of q and k independent, mean 0 and variance 1, each term q_i·k_i has mean 0 and variance 1,
    so the score q·k has variance d_k and standard deviation **√d_k** exactly; q·k / √d_k has std 1 at every d_k.
    Softmax saturation has no closed form, so it is averaged over ``n_draws`` draws of one query and ``n_keys``
    keys. A draw uses the scores' exact distribution: given q, the scores k_j·q are independent N(0, ‖q‖²), and
    ‖q‖² is χ² with d_k degrees of freedom, so the scores are ‖q‖·z with z ~ N(0, I) — the same as multiplying
    d_k-dimensional vectors, at the same cost for every d_k. Every d_k shares the draws of z (common random
    numbers), so the curves are smooth; the raw curve rises monotonically (tested).

    Returns one dict per ``d_k``: ``d_k``; ``score_std`` = √d_k (exact) and ``score_std_sampled`` (of the drawn
    scores); ``max_raw`` / ``max_scaled``: the mean largest softmax weight without / with ÷√d_k (uniform:
    1 / n_keys); ``entropy_raw`` / ``entropy_scaled``: the mean entropy of the weights in nats (uniform: ln n_keys).
    """
    if n_keys < 2 or n_draws < 1 or any(int(d) < 1 for d in d_ks):
        raise ValueError("need n_keys >= 2, n_draws >= 1 and every d_k >= 1")
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n_draws, n_keys))
    rows = []
    for d_k in (int(d) for d in d_ks):
        norm_q = np.sqrt(rng.chisquare(d_k, n_draws))[:, None]  # ‖q‖ of each draw
        scores = norm_q * z  # [draws, keys]: q·k_j
        w_raw, w_scaled = softmax_rows(scores), softmax_rows(scores / math.sqrt(d_k))
        rows.append(
            dict(
                d_k=d_k,
                score_std=math.sqrt(d_k),
                score_std_sampled=float(scores.std()),
                max_raw=float(w_raw.max(axis=1).mean()),
                max_scaled=float(w_scaled.max(axis=1).mean()),
                entropy_raw=_mean_entropy(w_raw),
                entropy_scaled=_mean_entropy(w_scaled),
            )
        )
    return rows


def _mean_entropy(weights: np.ndarray) -> float:
    """Mean over rows of the entropy in nats of ``weights [rows, n]`` (0·log 0 = 0)."""
    logs = np.log(np.where(weights > 0, weights, 1.0))
    return float(-(weights * logs).sum(axis=1).mean())


# --- sinusoidal positions ------------------------------------------------------------------------------
def sinusoidal(max_len: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """``[max_len, d_model]`` float64 sinusoidal table (Vaswani et al. §3.5, base 10000): the model's own
    :func:`model.positional.sinusoidal_table`, kept in double precision for the worked examples.
    Raises ``ValueError`` for odd ``d_model`` or non-positive sizes."""
    return sinusoidal_table(max_len, d_model, base, dtype=torch.float64).numpy()


def frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    """``ω_i = base^(−2i/d_model)`` for ``i = 0 … d_model/2 − 1`` (``[d_model/2]``)."""
    return base ** (-np.arange(0, d_model, 2, dtype=float) / d_model)


def block_rotation(k: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """``M_k [d_model, d_model]``: block-diagonal, block i = ``[[cos ω_i k, sin ω_i k], [−sin ω_i k, cos ω_i k]]``.

    It acts on each ``(sin ω_i pos, cos ω_i pos)`` pair by the angle-addition formulas
    ``sin(a+b) = sin a cos b + cos a sin b`` and ``cos(a+b) = cos a cos b − sin a sin b``, so
    ``M_k · PE(pos) = PE(pos + k)`` for every ``pos`` (a linear map that does not depend on ``pos``).
    """
    if d_model <= 0 or d_model % 2:
        raise ValueError(f"d_model must be even and positive, got {d_model}")
    m = np.zeros((d_model, d_model))
    for i, w in enumerate(frequencies(d_model, base)):
        c, s = math.cos(w * k), math.sin(w * k)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    return m


def rotation_errors(table: np.ndarray, k: int, positions, base: float = 10000.0) -> list[dict]:
    """For each ``pos`` (with ``pos + k`` inside ``table [max_len, d_model]``): ``max |M_k·PE(pos) − PE(pos+k)|``."""
    table = np.asarray(table, dtype=float)
    m = block_rotation(k, table.shape[1], base)
    out = []
    for pos in positions:
        if 0 <= pos and 0 <= pos + k < table.shape[0]:
            out.append(
                {
                    "pos": int(pos),
                    "pos + k": int(pos + k),
                    "max abs error": float(np.abs(m @ table[pos] - table[pos + k]).max()),
                }
            )
    return out
