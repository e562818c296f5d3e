"""The Decoding lab's KV-cache tab: what the decoder's cache holds after a step, checked against the formula and
drawn, and the same tokens decoded with and without it, timed on this machine at a click.

It owns one piece of state, the timing button's result (``dl_cache_cmp``), kept with the tokens it measured.
"""

from __future__ import annotations

import platform

import streamlit as st
import torch

from app_pages.decoding import lab
from charts.kv_cache import cache_bytes, kv_cache_figure
from decoding.decoded import StepView
from model.checkpoint import Checkpoint
from serving import heavy
from ui import pieces, widgets


def kv_cache_tab(
    ckpt: Checkpoint, run: StepView, step: int, src_ids: list[int], src_tokens: list[str], cmp_key
) -> None:
    """What the KV cache holds after ``step`` (bytes per part, checked against the formula layers × heads × d_k ×
    positions × 2 × 4 bytes), the cache drawn, and a button that times decoding with and without it
    (:func:`app_pages.decoding.lab.compare_cache`, ms per step, best of 3). ``cmp_key`` identifies the decoded tokens,
    so a timing is shown only for the tokens it measured."""
    ss = st.session_state
    tok, cfg = ckpt.tokenizer, ckpt.config
    positions = run.cache_positions
    held_bytes = run.cache_nbytes()
    src_len = len(src_ids) if cfg.is_encoder_decoder else None
    formula = cache_bytes(cfg, positions, src_len or 0)
    m1, m2, m3 = st.columns(3)
    m1.metric("Self-attention K/V", f"{held_bytes['self'] / 1024:.1f} KiB")
    m2.metric("Cross-attention K/V", f"{held_bytes['cross'] / 1024:.1f} KiB")
    m3.metric("Total", f"{held_bytes['total'] / 1024:.1f} KiB")
    per = f"{cfg.n_decoder_layers} layers × {cfg.n_heads} heads × {cfg.d_k} (d_k)"
    agree = "matches" if formula == held_bytes else "differs from"
    cross_line = (
        f"Cross: {per} × {src_len} source pieces × 2 × 4 bytes = {formula['cross']:,} B. "
        if src_len
        else "No cross-attention (decoder-only model). "
    )
    st.caption(
        f"Self: {per} × {positions} positions × 2 (K and V) × 4 bytes = {formula['self']:,} B. "
        f"{cross_line}"
        f"The formula {agree} the cache's own count ({held_bytes['total']:,} B)."
    )
    widgets.show_figure(
        kv_cache_figure(
            cfg.n_decoder_layers,
            positions,
            new_rows=len(run.prefix) if step == 1 else 1,
            src_len=src_len,
            target_tokens=pieces.of_ids(tok, run.tokens[:positions]),
            source_tokens=src_tokens,
            cross_new=step == 1,
            title=f"Step {step}: what the decoder keeps instead of recomputing",
        ),
        key="dl_chart_kv",
    )
    st.markdown(
        "**Cache on vs. off**: the same tokens decoded by feeding one token per step with the cache, or "
        "the whole prefix every step without it."
    )
    if st.button(f"Measure both over these {step} steps", icon=":material/timer:", key="dl_cache_measure"):
        # in the gate for heavy work: no other computation of this server runs during the timing (nor is slowed by
        # it); measured afresh at each click, never shared
        timing = heavy.shared(
            ("kv-timing", cmp_key),
            lambda: lab.compare_cache(ckpt.model, src_ids, list(run.generated)),
            "the KV-cache timing",
            keep=False,
        )
        ss["dl_cache_cmp"] = (cmp_key, timing)
    held_cmp = ss.get("dl_cache_cmp")
    if not (held_cmp and held_cmp[0] == cmp_key):
        return
    res = held_cmp[1]
    where = f"{ckpt.model.device} ({platform.machine()}, {torch.get_num_threads()} torch threads)"
    st.markdown(
        f"Measured just now on this machine, {where}, best of 3: with the cache **{res.ms_per_step_on:.2f} ms** "
        f"per step, without it **{res.ms_per_step_off:.2f} ms** per step "
        f"({res.ms_per_step_off / max(res.ms_per_step_on, 1e-9):.1f}×). "
        f"Largest difference of any log-probability over {res.steps} steps × {cfg.vocab_size:,} tokens: "
        f"**{res.max_abs_diff:.1e}** (the same result, up to float rounding)."
    )
    st.caption(
        "For a short sentence and a small model the difference is small; it grows with the length, "
        "since without the cache step n recomputes all n positions in every layer."
    )
