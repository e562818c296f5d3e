"""Page "Worked examples": scaled dot-product attention, the causal mask, LayerNorm and the multi-head split,
computed step by step on small editable matrices (the numbers a lecture works through by hand); scaled dot-product
attention also on one head of the model picked in the sidebar, with its own numbers (``app_pages/lecture/live.py``)."""

import numpy as np
import pandas as pd
import streamlit as st

from app_pages.lecture import live as lecture_live
from app_pages.lecture.live import show_matrix
from charts.teaching import scaling_chart
from teaching import worked
from ui import url
from ui.page_state import LECTURE
from ui.widgets import show_figure, show_table

st.title("Worked examples")
st.caption("Small matrices you can edit; every intermediate is shown with 4 decimals. Rows are tokens.")


def editor(
    label: str, default: np.ndarray, param: str, prefix: str = "d", title: str = "", row_prefix: str = "t"
) -> np.ndarray | None:
    """An editable matrix under its heading (``**label**`` and ``title``), rows named ``{row_prefix}0, …`` and
    columns ``{prefix}0, …``; kept in the link as ``?param=1,0;0,1`` when it differs from ``default``, and in the
    session under ``LECTURE.matrix.sub(param)``. ``None``
    (with a warning) when a cell is empty or not a number."""
    key = LECTURE.matrix.sub(param)
    # what the editor starts from: the link's matrix (first visit) or the example
    base = LECTURE.matrix.sub(param, "from_link")
    if base not in st.session_state:
        st.session_state[base], note = url.matrix_param(st.query_params, param, default, what=f"matrix {label}")
        url.show_notes(note)
    st.markdown(f"**{label}**" + (f" — {title}" if title else ""))
    matrix = st.session_state[base]
    frame = pd.DataFrame(
        matrix,
        columns=[f"{prefix}{j}" for j in range(default.shape[1])],
        index=[f"{row_prefix}{i}" for i in range(len(matrix))],
    )
    edited = st.data_editor(frame, key=key, hide_index=False, width="stretch")
    values = pd.DataFrame(edited).apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    if not np.isfinite(values).all():
        st.warning(f"{label}: every cell must be a number.")
        return None
    url.put(param, url.format_matrix(values), url.format_matrix(default))
    return values


show = show_matrix

# --- why scale: its numbers ------------------------------------------------------------------------------------------
N_KEYS, N_DRAWS = 10, 20_000  # enough draws for smooth curves; computed once per seed (about 0.5 s)


@st.cache_data(show_spinner=False, max_entries=8)
def _scaling(seed: int) -> list[dict]:
    return worked.scaling_demo(n_keys=N_KEYS, n_draws=N_DRAWS, seed=seed)


@st.fragment
def lecture_page() -> None:
    """The page below the sidebar, as a fragment: an edited matrix, a checkbox or the number of heads reruns
    this, not the app around it (the navigation, the sidebar's picker and summary)."""
    # --- scaled dot-product attention ---------------------------------------------------------------------
    st.header("Scaled dot-product attention")
    st.latex(r"\mathrm{Attention}(Q,K,V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V")
    if lecture_live.live_mode():
        # The editors are not drawn: their matrices are read from the link again when they are (the link keeps edits).
        for name in ("q", "k", "v"):
            st.session_state.pop(LECTURE.matrix.sub(name, "from_link"), None)
        lecture_live.live_section(LECTURE.text_box)
    else:
        url.init_widget("we_scale", lambda p: url.bool_param(p, "scaled", True))
        url.init_widget("we_causal", lambda p: url.bool_param(p, "causal", False))
        c1, c2, c3 = st.columns(3)
        with c1:
            q = editor("Q", worked.REF_Q, "q", title="queries, one row per token", row_prefix="q")
        with c2:
            k = editor("K", worked.REF_K, "k", title="keys, one row per token", row_prefix="k")
        with c3:
            v = editor("V", worked.REF_V, "v", title="values, one row per token", row_prefix="v")
        o1, o2 = st.columns(2)
        scale = o1.checkbox("Divide by √d_k", key="we_scale")
        causal = o2.checkbox("Causal mask (decoder self-attention)", key="we_causal")
        url.put("scaled", scale, True)
        url.put("causal", causal, False)
        if q is not None and k is not None and v is not None:
            try:
                r = worked.attention_steps(q, k, v, scale=scale, causal=causal)
            except ValueError as exc:
                st.warning(str(exc))
            else:
                # the output's columns are V's feature columns (named as in V's editor); v0, v1… name V's rows
                lecture_live.attention_steps_view(
                    r,
                    q.shape[1],
                    scale,
                    causal,
                    [f"q{i}" for i in range(q.shape[0])],
                    [f"k{j}" for j in range(k.shape[0])],
                    [f"d{j}" for j in range(v.shape[1])],
                )

    st.subheader("The causal mask example")
    st.markdown("Scores E (no scaling), keys after each query set to −∞, then softmax per row:")
    ce = worked.attention_steps(worked.REF_CAUSAL_SCORES, np.eye(3), np.eye(3), scale=False, causal=True)
    a, b = st.columns(2)
    with a:
        show(worked.REF_CAUSAL_SCORES, "E", ["t0", "t1", "t2"], ["t0", "t1", "t2"])
    with b:
        show(ce["weights"], "softmax(masked E)", ["t0", "t1", "t2"], ["t0", "t1", "t2"])
    st.caption("Token 0 can only see itself (weight 1); row 1 is softmax(0.4, 0.5) = (0.4750, 0.5250).")

    # --- LayerNorm ------------------------------------------------------------------------------------------
    st.header("Layer normalisation")
    st.latex(
        r"\mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta"
        r"\quad\text{per token, over its } d_{model} \text{ features}"
    )
    x_default = np.array([[1.0, 2.0, 3.0, 4.0], [2.0, -1.0, 0.5, 0.0], [10.0, 10.0, 10.0, 11.0]])
    # The editor's grid draws its numbers in small type (no CSS reaches its canvas): beside it, X as large as the steps
    # below, the numbers a lecture reads out.
    x_edit, x_show = st.columns(2)
    with x_edit:
        x = editor("X", x_default, "x", title="one row per token, one column per feature", row_prefix="token ")
    if x is not None:
        with x_show:
            show(
                x,
                "X: the input, one row per token",
                [f"token {i}" for i in range(x.shape[0])],
                [f"d{j}" for j in range(x.shape[1])],
            )
    g1, g2 = st.columns(2)
    with g1:
        gamma = editor("γ", np.ones((1, 4)), "gamma", title="scale, one per feature", row_prefix="γ")
    with g2:
        beta = editor("β", np.zeros((1, 4)), "beta", title="shift, one per feature", row_prefix="β")
    if x is not None and gamma is not None and beta is not None:
        try:
            ln = worked.layer_norm_steps(x, gamma, beta)
        except ValueError as exc:
            st.warning(str(exc))
        else:
            tokens = [f"token {i}" for i in range(x.shape[0])]
            a, b = st.columns(2)
            with a:
                show(
                    np.stack([ln["mean"], ln["var"]], axis=1), "Mean and variance of each row", tokens, ["mean", "var"]
                )
            with b:
                show(ln["normalised"], "(x − mean) / √(var + ε): mean 0, variance 1", tokens)
            show(ln["output"], "γ ⊙ normalised + β", tokens)
            st.caption("Unlike BatchNorm, nothing is shared across tokens or sentences: each row is normalised alone.")

    # --- multi-head split ---------------------------------------------------------------------------------
    st.header("Multi-head: split and concatenate")
    url.init_widget("we_heads", lambda p: url.choice_param(p, "heads", {"1": 1, "2": 2, "4": 4}, 2, what="1, 2 or 4"))
    heads = st.radio("Heads (d_model = 4)", [1, 2, 4], horizontal=True, key="we_heads")
    url.put("heads", heads, 2)
    xm = np.arange(12, dtype=float).reshape(3, 4)
    split = worked.split_heads(xm, heads)
    st.markdown(
        f"`X [seq=3, d_model=4]` → reshape `[3, {heads}, {4 // heads}]` → transpose → "
        f"`[heads={heads}, seq=3, d_k={4 // heads}]` → each head attends on its own → concat → `[3, 4]`."
    )
    cols = st.columns(heads + 1)
    with cols[0]:
        show(xm, "X [3, 4]", [f"t{i}" for i in range(3)], [f"f{j}" for j in range(4)])
    for h in range(heads):
        with cols[h + 1]:
            show(
                split[h],
                f"head {h} [3, {4 // heads}]",
                [f"t{i}" for i in range(3)],
                [f"f{h * (4 // heads) + j}" for j in range(4 // heads)],
            )
    st.caption(
        f"concat(heads) equals X again: {np.array_equal(worked.concat_heads(split), xm)}. "
        "In the model, Q, K and V are projected first (W^Q, W^K, W^V) and the concatenation is followed by W^O."
    )

    st.header("Why divide by √d_k?")
    seed, note = url.int_param(st.query_params, "seed", 0, 0, 2**31 - 1)  # only the link sets it
    url.show_notes(note)
    LECTURE.seed.put(seed, 0)
    rows = _scaling(seed)
    st.markdown(
        "Let the entries of q and k be independent with mean 0 and variance 1. Each product qᵢkᵢ then has "
        "variance 1, so the score q·k, a sum of d_k of them, has **variance d_k and standard deviation √d_k**: "
        "the bigger the head, the further apart the scores, and the softmax saturates (one key gets nearly all "
        "the weight, and the gradients through the others vanish). Dividing by √d_k brings the spread back to "
        "1 at every d_k."
    )
    show_figure(scaling_chart(rows, N_KEYS))
    st.caption(
        f"Left: exact (std of q·k = √d_k). Right: the mean over {N_DRAWS:,} random draws of one query and "
        f"{N_KEYS} keys (seed {seed}); a uniform softmax gives each key 1/{N_KEYS}, with entropy "
        f"ln {N_KEYS} = {np.log(N_KEYS):.3f} nats."
    )
    SCALING_COLUMNS = {
        "d_k": "d_k",
        "score_std": "std of q·k = √d_k",
        "score_std_sampled": "std, sampled",
        "max_raw": "max weight, q·k",
        "max_scaled": "max weight, ÷√d_k",
        "entropy_raw": "entropy, q·k",
        "entropy_scaled": "entropy, ÷√d_k",
    }
    show_table(
        [{label: r[key] for key, label in SCALING_COLUMNS.items()} for r in rows],
        formats={label: "{:.3f}" for key, label in SCALING_COLUMNS.items() if key != "d_k"},
        height=36 * (len(rows) + 1) + 3,
    )  # every d_k, without a scrollbar

    # --- errata ---------------------------------------------------------------------------------------------
    # A neutral note, not an error box: nothing on this page went wrong; these are corrections to read.
    st.header("Known mistakes in the seed articles")
    with st.container(border=True):
        st.markdown(
            "The articles this project started from contain a few slips; the examples above use the correct math.\n\n"
            "- **Softmax over columns** is wrong: the softmax runs over each **row** (each query's weights over the "
            "keys sum to 1).\n"
            "- **`K^T` in NumPy** is not a transpose: `^` is bitwise XOR. Write `K.T` (or `K.transpose(-2, -1)` in "
            "PyTorch).\n"
            "- **Base 1000** in the positional encoding is a misprint: the paper uses **10000**.\n"
            "- **Encoder and decoder lengths need not match** for cross-attention: queries come from the decoder "
            "(n_tgt rows), keys and values from the encoder (n_src rows); the weights are [n_tgt, n_src]."
        )


lecture_page()
