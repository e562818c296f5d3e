"""The Training page's "heads forming" view: the probe sentences' attention at each log-spaced snapshot of a run,
following new snapshots while the run lives."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from model.config import CAUSAL_KINDS
from training import runs as R
from ui.widgets import show_figure
from viz.attention import attention_heatmap
from viz.labels import KIND_SHORT
from viz.theme import HALF_PX


def show_heads_forming(run_dir: Path, live: bool) -> None:
    """Draw the view for ``run_dir``; while the run is ``live`` it is a fragment that re-reads the snapshots every
    5 s."""
    st.fragment(run_every=5 if live else None)(_heads_forming)(run_dir)


def _heads_forming(run_dir: Path) -> None:
    """The attention of the probe sentences at a snapshot step, re-read every 5 s while the run lives (drawn once
    with the page, it stayed on the step-0 snapshot while snapshots 10–300 were written)."""
    snapshots = R.read_probes(run_dir)
    if not snapshots:
        if R.read_train_args(run_dir).get("impl", "ours") != "ours":
            st.info(
                "This run trains the torch.nn.Transformer baseline, whose attention cannot be traced: it has no "
                "attention snapshots. Compare its curves with another run's above."
            )
        else:
            st.info("No attention snapshots yet (they are taken at steps 0, 10, 30, 100, 300, …).")
        return
    steps = [s.step for s in snapshots]
    # Follow the newest snapshot as it appears, unless the person has pinned an earlier one: a keyed slider keeps
    # its value, so it stayed on the snapshot that was newest when the page was drawn. Each newest step gets its own
    # slider (its key), starting at the pin or the newest; the script never writes a slider's state, which would
    # race with the other fragments' requests (they carry the value the browser had).
    pin = st.session_state.get("tn_hf_pin")
    start = pin[1] if pin and pin[0] == run_dir.name and pin[1] in steps else steps[-1]
    key = f"tn_hf_step_{run_dir.name}_{steps[-1]}"

    def pinned() -> None:
        chosen = st.session_state[key]
        st.session_state["tn_hf_pin"] = None if chosen == steps[-1] else (run_dir.name, chosen)

    snap_step = (
        st.select_slider("snapshot step", steps, value=start, key=key, on_change=pinned) if len(steps) > 1 else steps[0]
    )
    probes = snapshots[steps.index(snap_step)].probes
    if not probes:
        return
    c1, c2 = st.columns(2)
    src_i = c1.selectbox("probe sentence", range(len(probes)), format_func=lambda i: probes[i].source, key="tn_hf_src")
    probe = probes[src_i]
    trace = probe.trace
    if not trace.kinds:
        return
    kind = c2.selectbox("attention", trace.kinds, key="tn_hf_kind", format_func=lambda k: KIND_SHORT.get(k, k))
    if probe.continues:  # a decoder-only run continues the probe sentence
        st.markdown(f"Continuation at step {snap_step}: {probe.source} **{probe.output}**")
    else:
        st.markdown(f"Translation at step {snap_step}: **{probe.output}**")
    q_lab, k_lab = trace.labels(kind)
    attention = trace.attention[kind]  # [layers, heads, q, k]
    n_layers, n_heads, n_q, n_k = attention.shape
    q_lab = q_lab if len(q_lab) == n_q else [str(i) for i in range(n_q)]
    k_lab = k_lab if len(k_lab) == n_k else [str(i) for i in range(n_k)]
    # Two heads a row, as on the Attention page: in one column per head (four or more across) each map was ~200 px
    # wide and 260 px tall, and labelled 7 of 13 queries and a jumble of keys; its own height fits every row.
    for li in range(n_layers):
        for hi in range(n_heads):
            if hi % 2 == 0:
                cols = st.columns(2)
            fig = attention_heatmap(
                attention[li, hi].numpy(),
                q_lab,
                k_lab,
                title=f"layer {li + 1} · head {hi + 1}",
                causal=kind in CAUSAL_KINDS,
                width=HALF_PX,
            )
            show_figure(fig, where=cols[hi % 2], key=f"tn_chart_hf_{kind}_{li}_{hi}")
