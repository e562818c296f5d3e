"""The Attention page's two heaviest tabs, Ablation and Compare, as Streamlit renderers, and the page's chart call.

Both read the page's current view (:class:`app_pages.attention.views.View`: kind, layer, head, word level and the
weights shown) and keep their own controls in the link (``?ablate=&sweep=``, ``?compare=&compare_text=&compare_ckpt=``).
"""

from __future__ import annotations

import math
from pathlib import Path
from types import MappingProxyType

import streamlit as st

from app_pages.attention import views
from decoding.stepping import strip_eos
from model.checkpoint import Checkpoint
from model.hf.generation import decoding_cap
from reading.analysis import ablation_sweep, greedy_with_head_masks, sequence_log_probs
from serving import heavy
from serving.figures import shared
from training.runs import run_checkpoints
from ui import checkpoints, pieces, state, url, widgets
from ui.folders import checkpoint_folder, folder_arch
from ui.limits import limits
from viz.attention import attention_heatmap, causal_blank
from viz.attention_views import difference_heatmap
from viz.head_stats import log_prob_figure, sweep_heatmaps
from viz.labels import KIND_SHORT, end_sentence, head_name


def plot(fig, key: str | None = None) -> None:
    """One Plotly chart at the page's width (:func:`ui.widgets.show_figure`: larger fonts in presentation mode)."""
    widgets.show_figure(fig, key=key)


# --- shared computations (serving.heavy: bounded for the whole server, each computed once per checkpoint version,
# sentence and heads, and shared by every visitor; the values are tuples) ------------------------------------------
def _log_probs(ckpt: Checkpoint, src_ids: tuple, tgt_ids: tuple, heads: tuple) -> tuple[float, ...]:
    def compute() -> tuple[float, ...]:
        masks = views.head_masks(heads, ckpt.config.attention_layers(), ckpt.config.n_heads)
        return tuple(sequence_log_probs(ckpt.model, list(src_ids) or None, list(tgt_ids), masks).tolist())

    return heavy.shared(
        ("log_probs", *checkpoints.checkpoint_version(ckpt), src_ids, tgt_ids, heads),
        compute,
        "the scores of this translation",
    )


def _greedy_without(ckpt: Checkpoint, src_ids: tuple, heads: tuple, max_new: int) -> tuple[int, ...]:
    def compute() -> tuple[int, ...]:
        masks = views.head_masks(heads, ckpt.config.attention_layers(), ckpt.config.n_heads)
        return tuple(greedy_with_head_masks(ckpt.model, list(src_ids) or None, masks, max_new_tokens=max_new))

    return heavy.shared(
        ("without", *checkpoints.checkpoint_version(ckpt), src_ids, heads, max_new),
        compute,
        "the translation without those heads",
    )


def _sweep(ckpt: Checkpoint, src_ids: tuple, tgt_ids: tuple, layers: tuple) -> MappingProxyType:
    def compute() -> MappingProxyType:
        swept = ablation_sweep(ckpt.model, list(src_ids) or None, list(tgt_ids), {k: list(v) for k, v in layers})
        return MappingProxyType({k: tuple(map(tuple, v.tolist())) for k, v in swept.items()})

    return heavy.shared(
        ("sweep", *checkpoints.checkpoint_version(ckpt), src_ids, tgt_ids, layers), compute, "the sweep of every head"
    )


# --- Ablation ------------------------------------------------------------------------------------------------------
def ablation_tab(ckpt: Checkpoint, src, all_ids: list[int], output_ids: list[int], view: views.View) -> None:
    """Switch heads off and score the translation ``all_ids`` (``<bos>`` … ``<eos>``) again; sweep every head, or for
    a model too big to sweep on this CPU (:func:`app_pages.attention.views.sweep_plan`) the heads of ``view``'s kind or
    layer, saying so."""
    tok, cfg = ckpt.tokenizer, ckpt.config
    ckpt_path, ckpt_mtime = checkpoints.checkpoint_version(ckpt)
    st.caption(
        "Switch heads off (their output is zeroed before W^O) and score **the translation above** again "
        "(teacher forcing): the log-probability of each of its tokens, with and without those heads."
    )
    counts = cfg.attention_layers()
    options = views.head_options(counts, cfg.n_heads)
    url.init_widget(
        "at_ablate",
        lambda p: url.choices_param(p, "ablate", options, what="heads switched off"),
        valid=lambda v: set(v) <= set(options),
    )
    chosen = st.multiselect("Heads to switch off", options, key="at_ablate", placeholder="e.g. cross L2 H3")
    url.put("ablate", sorted(chosen, key=options.index), [])
    heads = tuple(sorted(chosen, key=options.index))
    src_key, tgt_key = tuple(src.ids), tuple(all_ids)
    scored = pieces.of_ids(tok, all_ids[1:])
    if len(all_ids) < 2:
        st.info("The translation is empty: there is nothing to score.")
        return
    base = _log_probs(ckpt, src_key, tgt_key, ())
    m1, m2, m3 = st.columns(3)
    m1.metric("Total log-prob, all heads", f"{sum(base):.3f}")
    if heads:
        ablated = _log_probs(ckpt, src_key, tgt_key, heads)
        change = sum(ablated) - sum(base)
        m2.metric("Total log-prob, heads removed", f"{sum(ablated):.3f}", delta=f"{change:+.3f} nats")
        m3.metric(
            "Probability of the translation",
            f"× {math.exp(change):.3g}",
            help="exp(change): how much likelier (> 1) or less likely (< 1) the same translation becomes.",
        )
        plot(
            shared(
                log_prob_figure, scored, base, ablated, title=f"Per-token log-probability · {len(heads)} head(s) off"
            )
        )
        limit = decoding_cap(cfg, list(src.ids), ckpt.generation)  # the cap of the translation above
        new_ids = _greedy_without(ckpt, src_key, heads, limit)
        new_out = [t for t in new_ids[1:] if t != cfg.eos_id]
        same = new_out == list(output_ids)
        st.markdown(
            f"**Greedy translation without {', '.join(heads)}:** {tok.decode(new_out) or '(empty output)'} "
            f"{'— *unchanged*' if same else '— *changed*'}"
        )
    else:
        m2.metric("Total log-prob, heads removed", "—")
        plot(shared(log_prob_figure, scored, base, title="Per-token log-probability, all heads"))
        st.info("Pick one or more heads above to switch them off.")

    st.subheader("Every head, one at a time")
    sweep_key = (ckpt_path, ckpt_mtime, src_key, tgt_key)
    if "at_sweep_for" not in st.session_state:  # a link with ?sweep=1 shows the sweep again
        wanted, note = url.bool_param(st.query_params, "sweep", False)
        st.session_state["at_sweep_for"] = sweep_key if wanted else None
        url.show_notes(note)
    positions = len(all_ids) + (len(src.ids) if cfg.is_encoder_decoder else 0)
    plan = views.sweep_plan(
        counts, cfg.n_heads, ckpt.model.num_parameters(), positions, view.kind, view.layer, limits().sweep_budget
    )
    if plan.note:
        st.info(plan.note)
    label = {"all": "Sweep all heads", "kind": "Sweep this kind's heads", "layer": "Sweep this layer's heads"}
    if st.button(
        label.get(plan.scope, "Sweep all heads"),
        key="at_sweep",
        disabled=not plan.scorings,
        help=f"{plan.scorings} scorings of the translation, one per head",
    ):
        st.session_state["at_sweep_for"] = sweep_key
    swept = st.session_state.get("at_sweep_for") == sweep_key
    url.put("sweep", swept, False)
    if swept and plan.scorings:
        layers = tuple((k, tuple(v)) for k, v in plan.layers.items())
        result = _sweep(ckpt, src_key, tgt_key, layers)
        st.caption(
            "Drop in the translation's total log-probability when that head alone is removed (nats): "
            "**red = the head helped** this output, blue = the output got likelier without it."
        )
        # one kind per row, at the page's width: side by side, the cells were too narrow for their numbers
        figures = sweep_heatmaps(result, {k: KIND_SHORT[k] for k in result})
        for k, fig in zip(result, figures, strict=True):
            plot(fig, key=f"at_chart_sweep_{k}")
        if len(figures) > 1:
            st.caption(
                "All maps share one colour scale (± the largest drop of any head), so a colour means the "
                "same drop in each."
            )


# --- Compare -------------------------------------------------------------------------------------------------------
def comparable_checkpoints(ckpt: Checkpoint) -> dict[str, Path]:
    """Name → folder of every checkpoint with ``ckpt``'s architecture but another folder: the shipped ones, then
    every run's ``best/``, snapshots and kept evaluations (:func:`training.runs.run_checkpoints`, named
    ``runs/<run>/…``). Only these have the same attention kinds, so a difference map between two of them exists."""
    here = checkpoint_folder(ckpt).resolve()
    candidates = dict(checkpoints.available_checkpoints())
    candidates.update({f"runs/{name}": path for name, path in run_checkpoints().items()})
    return {
        name: path
        for name, path in candidates.items()
        if Path(path).resolve() != here and folder_arch(path) == ckpt.config.arch
    }


def compare_tab(ckpt: Checkpoint, src, tgt_inputs: list[int], view: views.View) -> None:
    """The current view beside the same view of a second sentence or a second checkpoint, and their difference."""
    tok, cfg = ckpt.tokenizer, ckpt.config
    modes = {"sentence": "another sentence", "checkpoint": "another checkpoint"}
    url.init_widget(
        "at_cmp_mode", lambda p: url.choice_param(p, "compare", modes, modes["sentence"], what="comparison")
    )
    mode = st.radio("Compare with", list(modes.values()), horizontal=True, key="at_cmp_mode")
    url.put("compare", next(k for k, v in modes.items() if v == mode), "sentence")
    other_trace, other_name = None, ""
    if mode == "another sentence":
        default = next(p for p in state.presets_for(ckpt) if p != src.text)
        url.init_widget(
            "at_cmp_text",
            lambda p: url.text_param(p, "compare_text", default, limits().max_chars, what="second sentence"),
        )
        other_text = st.text_input("Second sentence", key="at_cmp_text")
        too_long = url.put_text("compare_text", other_text, default)
        if too_long:
            st.caption(too_long)
        other_src = state.source_for(ckpt, other_text)
        if other_src is not None:
            o_all, o_out = state.full_translation(ckpt, other_src)
            other_trace = state.traced(ckpt, other_src, strip_eos(o_all, cfg.eos_id))[1]
            other_name = f"“{other_src.text}” → {tok.decode(o_out)}"
    else:
        others = comparable_checkpoints(ckpt)
        if not others:
            shipped = {
                n: folder_arch(p)
                for n, p in checkpoints.available_checkpoints().items()
                if Path(p) != checkpoint_folder(ckpt)
            }
            other_archs = ", ".join(f"{n} ({a})" for n, a in shipped.items())
            st.info(
                f"No other {cfg.arch} checkpoint to compare with. "
                + (
                    f"The other checkpoints ({other_archs}) have a different architecture: their attention kinds "
                    "differ (a decoder-only model has no encoder and no cross-attention), so no difference map "
                    "exists. "
                    if shipped
                    else ""
                )
                + "A training run of this architecture leaves comparable checkpoints (its `best/`, snapshots and "
                "kept evaluations, listed here by run): start one on the Training page, e.g. the preset "
                "that continues the shipped translator."
            )
            if "compare_ckpt" in st.query_params:
                url.show_notes(
                    "Ignored `compare_ckpt` (second checkpoint) = "
                    f"“{str(st.query_params['compare_ckpt'])[:30]}” "
                    "from the link: no checkpoint of this architecture is available here."
                )
            return
        url.init_widget(
            "at_cmp_ckpt",
            lambda p: url.choice_param(p, "compare_ckpt", list(others), next(iter(others)), what="second checkpoint"),
            valid=lambda n: n in others,
        )
        name = st.selectbox("Second checkpoint", list(others), key="at_cmp_ckpt")
        url.put("compare_ckpt", name, next(iter(others)))
        other, error = checkpoints.load_other(others[name])
        if other is None:
            st.warning(f"That checkpoint cannot be loaded: {error}")
        elif other.tokenizer.to_str() == tok.to_str():
            # Same tokenizer: the second model reads the same source and this translation (teacher forcing),
            # so the two maps have the same shape and differ only in where the models look.
            other_trace = state.traced(other, src, tgt_inputs)[1]
            other_name = f"checkpoint {name}, same sentence and translation"
        else:
            o_src = state.source_for(other, src.text)
            if o_src is not None:
                o_all, o_out = state.full_translation(other, o_src)
                other_trace = state.traced(other, o_src, strip_eos(o_all, other.config.eos_id))[1]
                other_name = f"checkpoint {name} (its own tokenizer and translation: {other.tokenizer.decode(o_out)})"
    if other_trace is None:
        return
    kind, layer, causal = view.kind, view.layer, view.causal
    o_attn = other_trace.attention[kind]
    o_layer = min(layer, o_attn.shape[0] - 1)
    o_q, o_k = other_trace.labels(kind)
    if view.words:
        o_attn, o_q, o_k = views.word_level(o_attn, o_q, o_k)
    pick = view.head if isinstance(view.head, int) and view.head < o_attn.shape[1] else "mean"
    first = view.weights[pick] if isinstance(pick, int) else view.weights.mean(0)
    second = o_attn[o_layer][pick] if isinstance(pick, int) else o_attn[o_layer].mean(0)
    st.caption(
        f"{KIND_SHORT[kind]} · layer {layer + 1} · {head_name(pick)}{view.unit}. Second: {end_sentence(other_name)}"
    )
    left, right = st.columns(2)
    with left:
        plot(
            shared(attention_heatmap, first, view.q_labels, view.k_labels, causal=causal, title="First"),
            key="at_chart_cmp_a",
        )
    with right:
        plot(shared(attention_heatmap, second, o_q, o_k, causal=causal, title="Second"), key="at_chart_cmp_b")
    if tuple(first.shape) == tuple(second.shape):
        a = causal_blank(first.numpy()) if causal else first
        b = causal_blank(second.numpy()) if causal else second
        plot(
            shared(difference_heatmap, a, b, view.q_labels, view.k_labels, title="Difference (second − first)"),
            key="at_chart_cmp_d",
        )
    else:
        st.info(
            f"The two maps have different shapes ({tuple(first.shape)} vs {tuple(second.shape)}), so "
            "there is no cell-by-cell difference: compare their patterns side by side."
        )
