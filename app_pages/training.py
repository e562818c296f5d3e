"""Training: launch a run of ``python -m training.train`` from a form, watch its curves live, stop / resume / delete
it, replay how the attention heads formed, and open the result in the explorer."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from model.config import ARCHITECTURES, CAUSAL_KINDS, POS_ENCODINGS
from training import form as TF
from training import launch as L
from training.config import PRECISIONS, SELECT, VOCAB_SOURCES
from training import runs as R
from ui.run_view import ARCH_LABELS, DATA_LABELS, progress
from ui.widgets import show_figure, show_table
from viz import training as VT
from viz.attention import attention_heatmap
from viz.labels import KIND_SHORT

CHECKPOINTS_ROOT = Path(__file__).resolve().parent.parent / "checkpoints"

st.title("Training")
st.caption("Train a small English → German Transformer here (or a decoder-only language model on the same "
           "sentences or on the Brown corpus's English prose) and watch it learn. Each run is the ordinary `python -m training.train` CLI running in the "
           "background; its folder under `runs/` holds the curves, log-spaced checkpoints and attention snapshots.")

root = R.runs_root()


# --- launch form ------------------------------------------------------------------------------------------
def recipe_fields(p: dict, preset: str) -> dict:
    """The low-resource recipe's knobs (regularisation, dictionary share, model selection, warm start), inside the
    launch form; returns them as form keys."""
    with st.expander("Low-resource recipe: regularisation, dictionary, selection, warm start"):
        k = lambda name: f"f_{name}_{preset}"  # noqa: E731  (one key per preset, so a preset change refills)
        c1, c2, c3, c4 = st.columns(4)
        att = c1.number_input("attention dropout", 0.0, 0.99, float(p["attention_dropout"]), step=0.05, key=k("adrop"))
        act = c2.number_input("FFN activation dropout", 0.0, 0.99, float(p["activation_dropout"] or p["dropout"]),
                              step=0.05, key=k("actdrop"), help="Dropout inside the feed-forward network.")
        src_wd = c3.number_input("source word dropout", 0.0, 0.99, float(p["src_word_dropout"]), step=0.05,
                                 key=k("swd"), help="Source pieces replaced by <unk> in training.")
        tgt_wd = c4.number_input("target word dropout", 0.0, 0.99, float(p["tgt_word_dropout"]), step=0.05,
                                 key=k("twd"), help="Decoder input pieces replaced by <unk> in training.")
        c1, c2, c3, c4 = st.columns(4)
        layerdrop = c1.number_input("decoder LayerDrop", 0.0, 0.99, float(p["decoder_layerdrop"]), step=0.05,
                                    key=k("ldrop"), help="Probability of skipping a decoder layer in a step.")
        wd = c2.number_input("weight decay (AdamW)", 0.0, 1.0, float(p["weight_decay"]), step=0.01, format="%.4f",
                             key=k("wd"))
        bpe_drop = c3.number_input("BPE-dropout", 0.0, 0.99, float(p["bpe_dropout"]), step=0.05, key=k("bped"),
                                   help="Training text re-segmented every epoch; the saved tokenizer never drops.")
        dec_layers = c4.number_input("decoder layers (0 = as encoder)", 0, 12, int(p["decoder_layers"] or 0),
                                     key=k("declayers"))
        c1, c2, c3, c4 = st.columns(4)
        vocab = c1.number_input("vocabulary size", 100, 64_000, int(p["vocab_size"]), step=500, key=k("vocab"))
        vocab_from = c2.selectbox("vocabulary learned from", VOCAB_SOURCES, VOCAB_SOURCES.index(p["vocab_from"]),
                                  key=k("vfrom"))
        share = c3.number_input("dictionary share of each step", 0.0, 0.9, float(p["dict_share"]), step=0.05,
                                key=k("share"), help="Phrase and word pairs mixed into every step (needs the "
                                                     "dictionary in the training data); 0 = whole batches of them.")
        precision = c4.selectbox("precision", PRECISIONS, PRECISIONS.index(p["precision"]),
                                 key=k("prec"), help="auto: bf16 on GPUs and CPUs with native bf16, else fp32.")
        c1, c2, c3, c4 = st.columns(4)
        select = c1.selectbox("best checkpoint by", SELECT, SELECT.index(p["select"]),
                              key=k("sel"), help="auto: valid chrF for a translator, loss for a language model.")
        eval_sents = c2.number_input("valid sentences scored (0 = all)", 0, 100_000, int(p["eval_sentences"]),
                                     key=k("evs"))
        keep = c3.number_input("keep last evaluations", 0, 50, int(p["keep_last"]), key=k("keep"),
                               help="For averaging: python -m training.average OUT runs/NAME/evals/step-*")
        patience = c4.number_input("patience (evaluations)", 0, 1000, int(p["patience"]), key=k("pat"))
        starts = ["(random weights)"] + [str(c) for c in TF.warm_start_choices()]
        init = st.selectbox("start from checkpoint (warm start)", starts,
                            starts.index(p["init_from"]) if p["init_from"] in starts else 0, key=k("init"),
                            help="Its weights, tokenizer and architecture (the shape fields above are then "
                                 "ignored), with a fresh optimizer; the schedule continues from its step.")
    return {"attention_dropout": float(att), "activation_dropout": float(act), "src_word_dropout": float(src_wd),
            "tgt_word_dropout": float(tgt_wd), "decoder_layerdrop": float(layerdrop), "weight_decay": float(wd),
            "bpe_dropout": float(bpe_drop), "decoder_layers": int(dec_layers) or None, "vocab_size": int(vocab),
            "vocab_from": vocab_from, "dict_share": float(share), "precision": precision, "select": select,
            "eval_sentences": int(eval_sents), "keep_last": int(keep), "patience": int(patience),
            "init_from": None if init == starts[0] else init}


def launch_form() -> None:
    preset = st.selectbox("Preset", list(TF.PRESETS), key="train_preset",
                          help="Fills the form; the 2-minute demos train a tiny model on 3,000 sentences (pairs).")
    p = TF.preset_form(preset)
    with st.form("launch"):
        arch = st.selectbox(
            "architecture", ARCHITECTURES, ARCHITECTURES.index(p["arch"]), key=f"f_arch_{preset}",
            format_func=lambda a: ARCH_LABELS.get(a, a),
            help="A decoder-only model learns to continue text: each side of every training pair (English and "
                 "German) is one text. It is evaluated by loss and perplexity; BLEU does not apply.")
        c1, c2, c3, c4 = st.columns(4)
        d_model = c1.number_input("d_model", 8, 1024, p["d_model"], step=8, key=f"f_d_model_{preset}")
        n_heads = c2.number_input("heads", 1, 32, p["n_heads"], key=f"f_heads_{preset}")
        layers = c3.number_input("layers (enc = dec)", 1, 12, p["layers"], key=f"f_layers_{preset}",
                                 help="Encoder and decoder layers each; a decoder-only model has this many layers.")
        d_ff = c4.number_input("d_ff", 8, 8192, p["d_ff"], step=64, key=f"f_dff_{preset}")
        c1, c2, c3, c4 = st.columns(4)
        dropout = c1.number_input("dropout", 0.0, 0.99, float(p["dropout"]), step=0.05, key=f"f_drop_{preset}")
        pos = c2.selectbox("positional encoding", POS_ENCODINGS, POS_ENCODINGS.index(p["pos_encoding"]),
                           key=f"f_pos_{preset}")
        norm = c3.radio("layer norm", ["post-LN (paper)", "pre-LN"], index=int(p["norm_first"]),
                        key=f"f_norm_{preset}")
        smoothing = c4.number_input("label smoothing", 0.0, 0.99, float(p["label_smoothing"]), step=0.05,
                                    key=f"f_ls_{preset}")
        c1, c2, c3, c4 = st.columns(4)
        warmup = c1.number_input("warmup steps", 0, 100_000, p["warmup"], key=f"f_warm_{preset}")
        peak_lr = c2.number_input("peak learning rate", 1e-6, 1.0, float(p["peak_lr"]), format="%.5f",
                                  key=f"f_lr_{preset}")
        batch = c3.number_input("batch tokens", 100, 100_000, p["batch_tokens"], step=100, key=f"f_bt_{preset}")
        seed = c4.number_input("seed", 0, 1_000_000, p["seed"], key=f"f_seed_{preset}")
        c1, c2, c3, c4 = st.columns(4)
        max_steps = c1.number_input("max steps", 1, 10_000_000, p["max_steps"], key=f"f_steps_{preset}")
        max_minutes = c2.number_input("max minutes (0 = no limit)", 0.0, 10_000.0, float(p["max_minutes"]),
                                      key=f"f_min_{preset}")
        device = c3.selectbox("device", TF.DEVICES, key=f"f_dev_{preset}")
        name = c4.text_input("run name (optional)", key=f"f_name_{preset}")
        data = st.radio("training data", TF.DATA_SOURCES, index=TF.DATA_SOURCES.index(p["data"]), horizontal=True,
                        key=f"f_data_{preset}", format_func=lambda d: DATA_LABELS.get(d, d),
                        help="Ding dictionary pairs (a decoder-only model trains on both sides of each as texts), "
                             "or the Brown corpus's English sentences for a decoder-only language model.")
        recipe = recipe_fields(p, preset)
        upload = st.file_uploader("your own data: source<TAB>target per line (.tsv; a decoder-only model trains on "
                                  "both columns)", type=["tsv", "txt"], key=f"f_up_{preset}")
        submitted = st.form_submit_button("Start training", type="primary")
    if not submitted:
        return
    form = {**p, "arch": arch, "d_model": int(d_model), "n_heads": int(n_heads), "layers": int(layers),
            "d_ff": int(d_ff), "dropout": float(dropout), "pos_encoding": pos, "norm_first": norm == "pre-LN",
            "label_smoothing": float(smoothing), "warmup": int(warmup), "peak_lr": float(peak_lr),
            "batch_tokens": int(batch), "seed": int(seed), "max_steps": int(max_steps),
            "max_minutes": float(max_minutes), "device": device, "data": data,
            "train_tsv": "(uploaded)" if upload is not None else None, **recipe}
    errors = TF.validate_form(form)
    if name and not L.safe_name(name):
        errors.append("a run name may hold letters, digits, '.', '_' and '-' only")
    if errors:
        st.error("Nothing was started:\n" + "\n".join(f"- {e}" for e in errors))
        return
    try:
        run_dir = L.launch(form, root, name=name or None,
                          train_tsv_bytes=upload.getvalue() if data == "tsv" and upload else None)
    except (L.LaunchError, OSError) as exc:
        st.error(f"Nothing was started: {exc}")
        return
    st.session_state["train_watch"] = run_dir.name
    st.success(f"Started run `{run_dir.name}`. The command: `{' '.join(TF.build_command(form, run_dir)[1:])}`")


if L.demo_mode():
    st.info("This is the hosted demo: training is switched off here, runs are shown read-only. "
            "Clone the repository to train your own model (`make run`, then this page).")
else:
    with st.expander("Start a new run", expanded=not L.list_runs(root)):
        launch_form()


# --- runs table -------------------------------------------------------------------------------------------
runs = L.list_runs(root)
st.subheader("Runs")
if not runs:
    st.info(f"No runs yet under `{root}`.")
    st.stop()
table = pd.DataFrame([{k: v for k, v in r.items() if k not in ("path", "error")} for r in runs])
show_table(table)
names = [r["name"] for r in runs]
wanted = st.session_state.get("train_watch")
watched = st.selectbox("Watch run", names, index=names.index(wanted) if wanted in names else 0, key="train_pick")
st.session_state["train_watch"] = watched
run_dir = root / watched


# --- charts ---------------------------------------------------------------------------------------------
def chart(col, metrics: list[dict], series: dict[str, str], title: str, y_title: str, key: str, **kw) -> None:
    show_figure(VT.run_figure(metrics, series, title, y_title, **kw), where=col, key=key)


def show_run(run_dir: Path) -> str:
    """The watched run's header, progress by its binding limit, failure and charts; returns its state."""
    status = R.read_status(run_dir) or {}
    state = L.run_state(run_dir)
    metrics = R.read_metrics(run_dir)
    last_step = max((m["step"] for m in metrics if isinstance(m.get("step"), int)), default=0)
    status = {**status, "step": status.get("step") or last_step}
    done = progress(status, R.read_train_args(run_dir).get("max_minutes"), live=state in L.LIVE_STATES)
    st.markdown(f"**{run_dir.name}** — state **{state}** · " + (done[1] if done else f"step {status['step']}")
                + (f" · updated {status['updated']}" if status.get("updated") else ""))
    if done:
        st.progress(done[0], text=done[1])
    if state == "failed":
        st.error(f"The run failed: {status.get('error') or 'the trainer process is gone (killed?)'}")
        tail = R.log_tail(run_dir)
        if tail:
            st.code(tail, language=None)
    if not metrics:
        st.info("No metrics yet: the trainer is preparing the data and tokenizer.")
        return state
    c1, c2 = st.columns(2)
    chart(c1, metrics, {"train loss": "loss", "valid loss": "valid_loss"}, "Loss", "cross-entropy (nats/token)",
          "ch_loss")
    if R.run_arch(run_dir) == "decoder-only":  # a language model: no translation to score
        chart(c2, metrics, {"valid perplexity": "valid_ppl"}, "Validation perplexity (exp of the loss)",
              "perplexity", "ch_ppl", log_y=True)
    else:
        chart(c2, metrics, {"BLEU": "valid_bleu", "chrF": "valid_chrf"}, "Validation BLEU / chrF", "score (0–100)",
              "ch_bleu")
    c1, c2, c3 = st.columns(3)
    chart(c1, metrics, {"learning rate": "lr"}, "Learning rate (warmup, then 1/√step)", "learning rate", "ch_lr")
    chart(c2, metrics, {"tokens/s": "tokens_per_s"}, "Throughput", "tokens / second", "ch_tps")
    chart(c3, metrics, {"grad norm": "grad_norm"}, "Gradient norm (before clipping)", "norm", "ch_gn")
    return state


# The runs table and the buttons below are drawn with this state; the fragment alone redraws every 2 s while the
# run lives, so when the run's state changes (starting → running → finished) the whole page must be redrawn, or
# Stop stays disabled on a running run and the table keeps saying "starting".
state = L.run_state(run_dir)


@st.fragment(run_every=2 if state in L.LIVE_STATES else None)
def watch() -> None:
    if show_run(run_dir) != state:
        st.rerun()


watch()


# --- control ----------------------------------------------------------------------------------------------
if not L.demo_mode():
    c1, c2, c3, c4 = st.columns(4)
    if c1.button("Stop", disabled=state != "running", help="Graceful: saves last/ and exits"):
        L.stop(run_dir)
        st.toast("Stop requested: the run saves last/ and ends within a step or an evaluation.")
    if c2.button("Resume", disabled=not L.can_resume(run_dir) or L.active_run(root) is not None,
                 help="Continue exactly where last/ left off"):
        try:
            L.resume(run_dir, root)
            st.rerun()
        except L.LaunchError as exc:
            st.error(str(exc))
    no_status = R.read_status(run_dir) is None and R.recently_written(run_dir)
    if no_status:
        st.caption("This run has no status.json but was written to in the last minutes: it may be a CLI run "
                   "of an older trainer still going, so Delete is off.")
    if c3.button("Delete", disabled=state in ("running", "starting") or no_status):
        try:
            L.delete(run_dir)
            st.session_state.pop("train_watch", None)
            st.rerun()
        except L.LaunchError as exc:
            st.error(str(exc))
    has_best = (run_dir / "best" / "config.json").is_file()
    if c4.button("Open in explorer", disabled=not has_best,
                 help="Copies best/ to checkpoints/<run name>, where the sidebar's checkpoint picker lists it"):
        try:
            dest = L.export_best(run_dir, CHECKPOINTS_ROOT)
            st.success(f"Copied best/ to `checkpoints/{dest.name}`: pick “{dest.name}” in the sidebar's "
                       "checkpoint list (reload the page if it is not there yet).")
        except (L.LaunchError, OSError) as exc:
            st.error(str(exc))
    st.caption("“Open in explorer” copies the run's best/ checkpoint into `checkpoints/<run name>`, so the "
               "sidebar picker of the other pages lists it.")


# --- compare runs -----------------------------------------------------------------------------------------
st.subheader("Compare runs")
ended = [r["name"] for r in runs if r["state"] in ("finished", "stopped")]
c1, c2 = st.columns([3, 2])


def _compare_touched() -> None:
    st.session_state["compare_touched"] = True


# Preselect the two most recent ended runs until the person picks: also when a run ends while the page is open
# (a widget's default only counts when it is first drawn, so a run watched to its end was never preselected).
if (ended and not st.session_state.get("compare") and not st.session_state.get("compare_touched")
        and "compare" not in st.query_params):
    st.session_state["compare"] = ended[:2]
compared = c1.multiselect(
    "Runs to overlay", names, key="compare", bind="query-params", on_change=_compare_touched,
    max_selections=len(VT.PALETTE),
    help="One colour per run, the same on every chart. Preselected: the two most recent runs that have ended; "
         "any other choice is kept in the page address, so a reload or a shared link shows the same runs.")
x_axis = c2.radio("x axis", list(VT.X_AXES), key="compare_x", bind="query-params", horizontal=True,
                  help="Steps compare schedules; tokens seen compares runs with different batch sizes; wall time "
                       "compares what each run got for the same time budget.")
states = {r["name"]: r["state"] for r in runs}


@st.fragment(run_every=10 if any(states.get(n) in L.LIVE_STATES for n in compared) else None)
def compare_runs(chosen: list[str], x: str) -> None:
    """Overlaid curves of the chosen runs (refreshed every 10 s while one of them trains)."""
    if not chosen:
        st.caption("Pick runs above to overlay their training curves.")
        return
    records: dict[str, list[dict]] = {}
    for name in chosen:
        folder = root / name
        recs = R.read_metrics(folder)
        if not folder.is_dir():
            st.info(f"Run `{name}` is no longer there (deleted or moved since the list of runs was read); "
                    "it is left out of the charts.")
        elif not recs:
            st.info(f"Run `{name}` has no metrics yet (its first line comes after `--log-every` steps); "
                    "it is left out of the charts.")
        else:
            records[name] = recs
    if not records:
        return
    figs = VT.compare_figures(records, x=x, styles=VT.run_styles(chosen))  # colours by selection: stable
    st.caption("Training loss includes the run's label smoothing and is averaged since the previous log line; "
               "validation loss is plain cross-entropy on held-out sentences: compare training with training and "
               "validation with validation.")
    metrics = list(VT.METRICS)
    for i in range(0, len(metrics), 2):
        cols = st.columns(2)
        for col, metric in zip(cols, metrics[i:i + 2]):
            show_figure(figs[metric], where=col, key=f"cmp_{metric}")


compare_runs(compared, x_axis)


# --- heads forming ----------------------------------------------------------------------------------------
st.subheader("Heads forming")
snapshots = R.read_probes(run_dir)
if not snapshots:
    if R.read_train_args(run_dir).get("impl", "ours") != "ours":
        st.info("This run trains the torch.nn.Transformer baseline, whose attention cannot be traced: it has no "
                "attention snapshots. Compare its curves with another run's above.")
    else:
        st.info("No attention snapshots yet (they are taken at steps 0, 10, 30, 100, 300, …).")
    st.stop()
steps = [s.step for s in snapshots]
snap_step = st.select_slider("snapshot step", steps, value=steps[-1], key="hf_step") if len(steps) > 1 else steps[0]
probes = snapshots[steps.index(snap_step)].probes
if not probes:
    st.stop()
c1, c2 = st.columns(2)
src_i = c1.selectbox("probe sentence", range(len(probes)), format_func=lambda i: probes[i].source, key="hf_src")
probe = probes[src_i]
trace = probe.trace
if not trace.kinds:
    st.stop()
kind = c2.selectbox("attention", trace.kinds, key="hf_kind", format_func=lambda k: KIND_SHORT.get(k, k))
if probe.continues:  # a decoder-only run continues the probe sentence
    st.markdown(f"Continuation at step {snap_step}: {probe.source} **{probe.output}**")
else:
    st.markdown(f"Translation at step {snap_step}: **{probe.output}**")
q_lab, k_lab = trace.labels(kind)
attention = trace.attention[kind]  # [layers, heads, q, k]
n_layers, n_heads, n_q, n_k = attention.shape
q_lab = q_lab if len(q_lab) == n_q else [str(i) for i in range(n_q)]
k_lab = k_lab if len(k_lab) == n_k else [str(i) for i in range(n_k)]
for li in range(n_layers):
    cols = st.columns(n_heads)
    for hi in range(n_heads):
        fig = attention_heatmap(attention[li, hi].numpy(), q_lab, k_lab, title=f"layer {li + 1} · head {hi + 1}",
                                causal=kind in CAUSAL_KINDS, height=260)
        show_figure(fig, where=cols[hi], key=f"hf_{kind}_{li}_{hi}")
