"""Page "Positional encoding": the sinusoidal table, its waves and similarities, the linear-map property, and
what the loaded checkpoint uses (sinusoidal / learned / RoPE / ALiBi)."""

import streamlit as st

from charts.teaching import bar, dimension_waves, matrix_heatmap, norm_histogram
from teaching import positions
from teaching.worked import rotation_errors, sinusoidal
from ui import checkpoints, url
from ui.widgets import show_figure, show_table

PLOT = dict(width="stretch", theme=None)


@st.fragment
def positional_page() -> None:
    """The page below the sidebar, as a fragment: a size, an offset, a dimension or a head reruns this, not the
    app around it (the navigation, the sidebar's picker and summary)."""
    st.title("Positional encoding")
    st.caption(
        "Attention by itself ignores word order: it sees a set of vectors. The Transformer adds a position "
        "signal to each token embedding (Vaswani et al. 2017, §3.5)."
    )
    st.latex(
        r"PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{model}}}\right),\qquad "
        r"PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_{model}}}\right)"
    )
    st.info("The base is **10000** (paper §3.5). Some articles misprint it as 1000; the table below uses 10000.")

    # --- parameters (URL ?d_model=&length=&offset=&dims=) -------------------------------------------------------
    url.init_widget("pe_d_model", lambda p: url.int_param(p, "d_model", 64, 2, 1024))
    url.init_widget("pe_length", lambda p: url.int_param(p, "length", 64, 1, 512, what="positions"))
    url.init_widget("pe_offset", lambda p: url.int_param(p, "offset", 5, -511, 511, what="offset k"))
    c1, c2, c3 = st.columns(3)
    d_model = int(c1.number_input("d_model (even, 2–1024)", min_value=2, max_value=1024, key="pe_d_model", step=2))
    length = int(c2.number_input("positions (1–512)", min_value=1, max_value=512, key="pe_length", step=1))
    offset = int(c3.number_input("offset k for the linear map", min_value=-511, max_value=511, key="pe_offset", step=1))
    url.put("d_model", d_model, 64)
    url.put("length", length, 64)
    url.put("offset", offset, 5)

    d_ok, n_pos = d_model, length
    if d_ok % 2:
        d_ok = d_ok + 1 if d_ok < 1024 else d_ok - 1
        st.warning(f"d_model must be even (sin/cos pairs); got {d_model}, showing {d_ok}.")

    table = sinusoidal(n_pos, d_ok)
    st.subheader("The table")
    show_figure(matrix_heatmap(table, f"PE [{n_pos} positions × {d_ok} dimensions]"), **PLOT)
    st.caption(
        "Left columns (small i) oscillate fast, right columns slowly: every position gets a distinct "
        "pattern of phases, like the hands of a clock with many speeds."
    )

    default_dims = sorted({d for d in (0, 1, 4, 10, d_ok - 2) if d < d_ok})
    url.init_widget(
        "pe_dims",
        lambda p: url.int_list_param(p, "dims", default_dims, 0, d_ok - 1),
        valid=lambda v: all(d < d_ok for d in v),
    )
    dims = st.multiselect("Dimensions to plot as waves", list(range(d_ok)), key="pe_dims")
    url.put("dims", sorted(dims), default_dims)
    show_figure(dimension_waves(table, dims, "Selected dimensions over position"), **PLOT)

    st.subheader("Position–position similarity")
    show_figure(
        matrix_heatmap(
            positions.similarity(table), "PE(i) · PE(j)", "position j", "position i", colorscale="Viridis", zmid=None
        ),
        **PLOT,
    )
    st.caption(
        f"The diagonal is ‖PE(pos)‖² = d_model/2 = {d_ok // 2}; the dot product falls off with |i − j| and "
        "depends only on the distance, not on the absolute positions."
    )

    st.subheader("Relative positions are a linear map")
    st.markdown(
        r"For every offset $k$ the matrix $M_k$ with $2\times2$ blocks "
        r"$\begin{bmatrix}\cos\omega_i k & \sin\omega_i k\\ -\sin\omega_i k & \cos\omega_i k\end{bmatrix}$, "
        r"$\omega_i = 10000^{-2i/d_{model}}$, acting on each $(\sin, \cos)$ pair, gives "
        r"$M_k\,PE(pos) = PE(pos+k)$ — the same $M_k$ for every position (angle-addition formulas)."
    )
    if n_pos < 2 or not 0 <= abs(offset) < n_pos:
        st.warning(f"Pick an offset k with |k| < {n_pos} (the number of positions) to check the property.")
    else:
        checked = [p for p in (0, 1, 2, 7, 20, 50, n_pos - 1 - max(offset, 0)) if 0 <= p < n_pos]
        errors = rotation_errors(table, offset, sorted(set(checked)))
        show_table(errors, formats={"max abs error": "{:.2e}"})

    # --- the loaded checkpoint -------------------------------------------------------------------------------
    st.divider()
    st.subheader("In the loaded model")
    ckpt = checkpoints.require_checkpoint(summary=False)  # the sidebar's summary: below, outside the fragment
    cfg, model = ckpt.config, ckpt.model
    kind = cfg.pos_encoding
    st.markdown(
        f"This checkpoint uses **{kind}** positions (d_model {cfg.d_model}, max_len {cfg.max_len}, "
        f"{cfg.n_heads} heads)."
    )
    pos_table = getattr(getattr(model, "pos", None), "table", None)
    norms = positions.position_signal_norms(model, cfg.d_model)
    if kind in ("sinusoidal", "learned") and pos_table is not None and norms is not None:
        pe = pos_table.detach().float().cpu().numpy()
        halves = kind == "sinusoidal" and cfg.pos_layout == "halves"
        if halves:
            st.markdown(
                f"Its sines fill the **first half** of the dimensions and its cosines the **second** "
                f"(dimension i and {cfg.d_model // 2} + i share one frequency): the angles above, in Marian's "
                "layout, where the paper interleaves them (sin in even, cos in odd dimensions)."
            )
        elif kind == "learned":
            st.markdown(
                f"Its table was **learned** in training: one vector of {cfg.d_model} numbers for each of its "
                f"{cfg.max_len} positions, with no formula behind it."
            )
        rows = positions.drawn_rows(pe.shape[0], pe.shape[1])
        what = (
            "its fixed sinusoidal table" + (" (halves layout)" if halves else "")
            if kind == "sinusoidal"
            else "its learned table (model.pos.table)"
        )
        show_figure(matrix_heatmap(pe[:rows], f"{what}: [{rows} × {pe.shape[1]}]"), **PLOT)
        sim_rows = min(rows, positions.MAX_SIMILARITY_POSITIONS)
        if rows < pe.shape[0]:
            st.caption(
                f"The first {rows} of its {pe.shape[0]} positions: the whole table has "
                f"{pe.shape[0] * pe.shape[1]:,} numbers, too many to draw here."
            )
        show_figure(
            matrix_heatmap(
                positions.similarity(pe[:sim_rows]),
                f"Its PE(i) · PE(j), first {sim_rows} positions",
                "position j",
                "position i",
                colorscale="Viridis",
                zmid=None,
            ),
            **PLOT,
        )
        emb_norms, pe_norms = norms
        show_figure(norm_histogram(emb_norms, pe_norms, "How loud is the position signal?"), **PLOT)
        scaled = "embedding × √d_model" if cfg.scale_embeddings else "embedding (added unscaled)"
        st.markdown(
            f"Mean ‖{scaled}‖ = **{emb_norms.mean():.2f}** over {len(emb_norms)} tokens; "
            f"mean ‖PE(pos)‖ = **{pe_norms.mean():.2f}** over {len(pe_norms)} positions."
        )
    elif kind == "rope":
        rope_layers = positions.attention_layers(model, "rope")
        d_k = rope_layers[0].d_k if rope_layers else cfg.d_model // cfg.n_heads
        st.markdown(
            r"**RoPE** (Su et al. 2021) adds nothing to the embeddings. Inside self-attention, each pair "
            r"$i$ of every query and key is rotated by $\theta = pos \cdot 10000^{-2i/d_k}$, so "
            r"$q_m \cdot k_n$ depends on $m - n$ only."
        )
        if d_k % 2 == 0:
            ang = positions.rope_angles(min(cfg.max_len, 128), d_k)  # as the model's rope_rotate turns q and k
            show_figure(
                matrix_heatmap(
                    ang,
                    f"Rotation angle θ mod 2π (d_k = {d_k})",
                    "pair i",
                    "position",
                    colorscale="Twilight",
                    zmid=None,
                ),
                **PLOT,
            )
    elif kind == "alibi":
        slopes = positions.model_alibi_slopes(model, cfg.n_heads)  # the slopes this model's layers hold
        st.markdown(
            r"**ALiBi** (Press et al. 2022) adds nothing to the embeddings. Each head $h$ adds "
            r"$-m_h\,|i-j|$ to its attention scores, with slopes $m_h = 2^{-8(h+1)/H}$."
        )
        show_figure(bar([f"head {h}" for h in range(cfg.n_heads)], slopes.tolist(), "Slopes m_h", "", "m"), **PLOT)
        # heads are counted from 0 here, as in the slopes' formula and chart
        url.init_widget(
            "pe_head",
            lambda p: url.int_param(p, "head", 0, 0, cfg.n_heads - 1),
            valid=lambda h: h in range(cfg.n_heads),
        )
        head = st.selectbox("Head", list(range(cfg.n_heads)), key="pe_head")
        url.put("head", head, 0)
        n = min(cfg.max_len, 24)
        show_figure(
            matrix_heatmap(
                positions.alibi_bias_matrix(slopes[head], n),
                f"Bias −m·|i−j|, head {head}",
                "key j",
                "query i",
                colorscale="Blues_r",
                zmid=None,
            ),
            **PLOT,
        )
    else:
        st.markdown(
            "No position signal: the model sees its input as a bag of tokens (except through the causal "
            "mask of the decoder)."
        )


positional_page()
checkpoints.require_checkpoint()  # the sidebar's summary of the model (a fragment cannot write to the sidebar)
