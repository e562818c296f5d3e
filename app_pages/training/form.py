"""The Training page's launch form as a Streamlit renderer: a preset fills the fields, the low-resource recipe's
knobs sit in an expander, and a submit validates the form (:func:`launching.form.validate_form`) and starts the
ordinary ``python -m trainer.train`` CLI in the background (:func:`launching.launch.launch`)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app_pages.training.run_view import ARCH_LABELS, DATA_LABELS
from corpora.extra import EXTRA_CORPORA
from corpora.files import DataError
from corpora.mixture import DEFAULT_REPEATS, parse_repeats, prepared_corpora
from corpora.parallel import BACKTRANSLATED
from launching import form as TF
from launching import launch as L
from model.config import ARCHITECTURES, POS_ENCODINGS
from training.config import PRECISIONS, SELECT, VOCAB_SOURCES
from ui.limits import limits
from ui.page_state import TRAINING


def recipe_fields(p: dict, preset: str) -> dict:
    """The low-resource recipe's knobs (regularisation, dictionary share, model selection, warm start), inside the
    launch form; returns them as form keys."""
    with st.expander("Low-resource recipe: regularisation, dictionary, selection, warm start"):
        k = lambda name: TRAINING.form.sub(name, preset)  # noqa: E731  (one key per preset, so a preset change refills)
        c1, c2, c3, c4 = st.columns(4)
        att = c1.number_input("attention dropout", 0.0, 0.99, float(p["attention_dropout"]), step=0.05, key=k("adrop"))
        act = c2.number_input(
            "FFN activation dropout",
            0.0,
            0.99,
            float(p["activation_dropout"] or p["dropout"]),
            step=0.05,
            key=k("actdrop"),
            help="Dropout inside the feed-forward network.",
        )
        src_wd = c3.number_input(
            "source word dropout",
            0.0,
            0.99,
            float(p["src_word_dropout"]),
            step=0.05,
            key=k("swd"),
            help="Source pieces replaced by <unk> in training.",
        )
        tgt_wd = c4.number_input(
            "target word dropout",
            0.0,
            0.99,
            float(p["tgt_word_dropout"]),
            step=0.05,
            key=k("twd"),
            help="Decoder input pieces replaced by <unk> in training.",
        )
        c1, c2, c3, c4 = st.columns(4)
        layerdrop = c1.number_input(
            "decoder LayerDrop",
            0.0,
            0.99,
            float(p["decoder_layerdrop"]),
            step=0.05,
            key=k("ldrop"),
            help="Probability of skipping a decoder layer in a step.",
        )
        wd = c2.number_input(
            "weight decay (AdamW)", 0.0, 1.0, float(p["weight_decay"]), step=0.01, format="%.4f", key=k("wd")
        )
        bpe_drop = c3.number_input(
            "BPE-dropout",
            0.0,
            0.99,
            float(p["bpe_dropout"]),
            step=0.05,
            key=k("bped"),
            help="Training text re-segmented every epoch; the saved tokenizer never drops.",
        )
        dec_layers = c4.number_input(
            "decoder layers (0 = as encoder)", 0, 12, int(p["decoder_layers"] or 0), key=k("declayers")
        )
        c1, c2, c3, c4 = st.columns(4)
        vocab = c1.number_input("vocabulary size", 100, 64_000, int(p["vocab_size"]), step=500, key=k("vocab"))
        vocab_from = c2.selectbox(
            "vocabulary learned from", VOCAB_SOURCES, VOCAB_SOURCES.index(p["vocab_from"]), key=k("vfrom")
        )
        share = c3.number_input(
            "dictionary share of each step",
            0.0,
            0.9,
            float(p["dict_share"]),
            step=0.05,
            key=k("share"),
            help="Phrase and word pairs mixed into every step (needs the "
            "dictionary in the training data); 0 = whole batches of them.",
        )
        precision = c4.selectbox(
            "precision",
            PRECISIONS,
            PRECISIONS.index(p["precision"]),
            key=k("prec"),
            help="auto: bf16 on GPUs and CPUs with native bf16, else fp32.",
        )
        c1, c2, c3, c4 = st.columns(4)
        select = c1.selectbox(
            "best checkpoint by",
            SELECT,
            SELECT.index(p["select"]),
            key=k("sel"),
            help="auto: valid chrF for a translator, loss for a language model.",
        )
        eval_sents = c2.number_input(
            "valid sentences scored (0 = all)", 0, 100_000, int(p["eval_sentences"]), key=k("evs")
        )
        keep = c3.number_input(
            "keep last evaluations",
            0,
            50,
            int(p["keep_last"]),
            key=k("keep"),
            help="For averaging: python -m tools.average OUT runs/NAME/evals/step-*",
        )
        patience = c4.number_input("patience (evaluations)", 0, 1000, int(p["patience"]), key=k("pat"))
        starts = ["(random weights)"] + [str(c) for c in TF.warm_start_choices()]
        init = st.selectbox(
            "start from checkpoint (warm start)",
            starts,
            starts.index(p["init_from"]) if p["init_from"] in starts else 0,
            key=k("init"),
            help="Its weights, tokenizer and architecture (the shape fields above are then "
            "ignored), with a fresh optimizer; the schedule continues from its step.",
        )
    return {
        "attention_dropout": float(att),
        "activation_dropout": float(act),
        "src_word_dropout": float(src_wd),
        "tgt_word_dropout": float(tgt_wd),
        "decoder_layerdrop": float(layerdrop),
        "weight_decay": float(wd),
        "bpe_dropout": float(bpe_drop),
        "decoder_layers": int(dec_layers) or None,
        "vocab_size": int(vocab),
        "vocab_from": vocab_from,
        "dict_share": float(share),
        "precision": precision,
        "select": select,
        "eval_sentences": int(eval_sents),
        "keep_last": int(keep),
        "patience": int(patience),
        "init_from": None if init == starts[0] else init,
    }


#: The mixture's corpora as the form names them.
MIXTURE_LABELS = {
    "tatoeba": "Tatoeba (everyday)",
    "multi30k": "Multi30K (image captions)",
    "bcontrast": "BConTrasT (chat)",
    "ding": "Ding (dictionary sentences)",
}


def mixture_fields(p: dict, preset: str) -> str:
    """The mixture's shares (one number per corpus: how many times its pairs are repeated; 0 leaves it out), inside
    the launch form; returns them as a ``--mix`` value. Says which corpora are not prepared yet."""
    with st.expander("Real pairs mixture: the share of each corpus (training data = real pairs mixture)"):
        try:
            shares = parse_repeats(p.get("mix") or "", DEFAULT_REPEATS)
        except DataError:
            shares = dict(DEFAULT_REPEATS)
        ready = prepared_corpora()

        def share(col, corpus: str, label: str) -> int:
            return int(
                col.number_input(
                    label,
                    0,
                    20,
                    int(shares.get(corpus, 0)),
                    key=f"tn_form_mix_{corpus}_{preset}",
                    help="How many times this corpus's pairs are repeated in every epoch; 0 leaves it out.",
                )
            )

        chosen = {
            c: share(col, c, label)
            for col, (c, label) in zip(st.columns(len(MIXTURE_LABELS)), MIXTURE_LABELS.items(), strict=True)
        }
        # every general-domain file too (a preset may weigh them: the form must not drop a share it does not show)
        st.caption(
            "General-domain pairs (news, Wikipedia, software documentation; `python -m corpora prepare "
            "extra`), by file, and the back-translated pairs (`python -m tools.backtranslate`):"
        )
        files = (*EXTRA_CORPORA, BACKTRANSLATED)
        for row in range(0, len(files), 5):
            chosen |= {c: share(col, c, c) for col, c in zip(st.columns(5), files[row : row + 5], strict=False)}
        missing = [
            MIXTURE_LABELS.get(c, c) for c, n in chosen.items() if c not in ready and (c in MIXTURE_LABELS or n > 0)
        ]
        if missing:
            st.caption(
                f"Not prepared yet: {', '.join(missing)}. `python -m corpora prepare all` prepares them from "
                "`../shared/data` (docs/training.md says where to download them)"
                + (
                    "; `python -m tools.backtranslate` makes the back-translated pairs."
                    if BACKTRANSLATED in missing
                    else "."
                )
            )
    return ",".join(f"{c}={n}" for c, n in chosen.items() if n or c in MIXTURE_LABELS)  # unused extra files left out


def launch_form(root: Path) -> None:
    """The launch form (a preset fills it); on submit, validate it and start ``python -m trainer.train`` in a new
    folder under ``root``, or say why nothing was started. Never raises for bad input."""
    preset = st.selectbox(
        "Preset",
        list(TF.PRESETS),
        key="tn_form_preset",
        help="Fills the form; the 2-minute demos train a tiny model on 3,000 sentences (pairs).",
    )
    p = TF.preset_form(preset)
    with st.form(TRAINING.form.sub("launch")):
        arch = st.selectbox(
            "architecture",
            ARCHITECTURES,
            ARCHITECTURES.index(p["arch"]),
            key=f"tn_form_arch_{preset}",
            format_func=lambda a: ARCH_LABELS.get(a, a),
            help="A decoder-only model learns to continue text: each side of every training pair (English and "
            "German) is one text. It is evaluated by loss and perplexity; BLEU does not apply.",
        )
        c1, c2, c3, c4 = st.columns(4)
        d_model = c1.number_input("d_model", 8, 1024, p["d_model"], step=8, key=f"tn_form_d_model_{preset}")
        n_heads = c2.number_input("heads", 1, 32, p["n_heads"], key=f"tn_form_heads_{preset}")
        layers = c3.number_input(
            "layers (enc = dec)",
            1,
            12,
            p["layers"],
            key=f"tn_form_layers_{preset}",
            help="Encoder and decoder layers each; a decoder-only model has this many layers.",
        )
        d_ff = c4.number_input("d_ff", 8, 8192, p["d_ff"], step=64, key=f"tn_form_dff_{preset}")
        c1, c2, c3, c4 = st.columns(4)
        dropout = c1.number_input("dropout", 0.0, 0.99, float(p["dropout"]), step=0.05, key=f"tn_form_drop_{preset}")
        pos = c2.selectbox(
            "positional encoding", POS_ENCODINGS, POS_ENCODINGS.index(p["pos_encoding"]), key=f"tn_form_pos_{preset}"
        )
        norm = c3.radio(
            "layer norm", ["post-LN (paper)", "pre-LN"], index=int(p["norm_first"]), key=f"tn_form_norm_{preset}"
        )
        smoothing = c4.number_input(
            "label smoothing", 0.0, 0.99, float(p["label_smoothing"]), step=0.05, key=f"tn_form_ls_{preset}"
        )
        c1, c2, c3, c4 = st.columns(4)
        warmup = c1.number_input("warmup steps", 0, 100_000, p["warmup"], key=f"tn_form_warm_{preset}")
        peak_lr = c2.number_input(
            "peak learning rate", 1e-6, 1.0, float(p["peak_lr"]), format="%.5f", key=f"tn_form_lr_{preset}"
        )
        batch = c3.number_input("batch tokens", 100, 100_000, p["batch_tokens"], step=100, key=f"tn_form_bt_{preset}")
        seed = c4.number_input("seed", 0, 1_000_000, p["seed"], key=f"tn_form_seed_{preset}")
        c1, c2, c3, c4 = st.columns(4)
        max_steps = c1.number_input("max steps", 1, 10_000_000, p["max_steps"], key=f"tn_form_steps_{preset}")
        max_minutes = c2.number_input(
            "max minutes (0 = no limit)", 0.0, 10_000.0, float(p["max_minutes"]), key=f"tn_form_min_{preset}"
        )
        device = c3.selectbox("device", TF.DEVICES, key=f"tn_form_dev_{preset}")
        name = c4.text_input("run name (optional)", key=f"tn_form_name_{preset}")
        data = st.radio(
            "training data",
            TF.DATA_SOURCES,
            index=TF.DATA_SOURCES.index(p["data"]),
            horizontal=True,
            key=f"tn_form_data_{preset}",
            format_func=lambda d: DATA_LABELS.get(d, d),
            help="Ding dictionary pairs (a decoder-only model trains on both sides of each as texts), "
            "the real sentence pairs (Tatoeba, Multi30K, BConTrasT, Ding) mixed with the shares "
            "below, your own TSV, or the Brown corpus's English sentences for a decoder-only "
            "language model.",
        )
        reverse = st.checkbox(
            "German → English: every pair turned round (a back-translation model)",
            value=bool(p.get("reverse")),
            key=f"tn_form_rev_{preset}",
            help="Trains the model that makes synthetic pairs of German text for an English → "
            "German one (python -m tools.backtranslate; docs/training.md). The pages "
            "explore English → German models only.",
        )
        mix = mixture_fields(p, preset)
        recipe = recipe_fields(p, preset)
        upload_mb = limits().upload_mb
        upload = st.file_uploader(
            f"your own data: source<TAB>target per line (.tsv, up to {upload_mb} MB; a "
            "decoder-only model trains on both columns)",
            type=["tsv", "txt"],
            key=f"tn_form_up_{preset}",
            max_upload_size=upload_mb,
        )
        submitted = st.form_submit_button("Start training", type="primary")
    if not submitted:
        return
    form = {
        **p,
        "arch": arch,
        "d_model": int(d_model),
        "n_heads": int(n_heads),
        "layers": int(layers),
        "d_ff": int(d_ff),
        "dropout": float(dropout),
        "pos_encoding": pos,
        "norm_first": norm == "pre-LN",
        "label_smoothing": float(smoothing),
        "warmup": int(warmup),
        "peak_lr": float(peak_lr),
        "batch_tokens": int(batch),
        "seed": int(seed),
        "max_steps": int(max_steps),
        "max_minutes": float(max_minutes),
        "device": device,
        "data": data,
        "reverse": bool(reverse),
        "train_tsv": "(uploaded)" if upload is not None else None,
        "mix": mix,
        **recipe,
    }
    errors = TF.validate_form(form)
    if upload is not None and upload.size > upload_mb * 2**20:  # the browser's own check can be bypassed
        errors.append(f"the uploaded file has {upload.size / 2**20:.0f} MB; the cap is {upload_mb} MB")
    if name and not L.safe_name(name):
        errors.append("a run name may hold letters, digits, '.', '_' and '-' only")
    if errors:
        st.error("Nothing was started:\n" + "\n".join(f"- {e}" for e in errors))
        return
    try:
        run_dir = L.launch(
            form, root, name=name or None, train_tsv_bytes=upload.getvalue() if data == "tsv" and upload else None
        )
    except (L.LaunchError, OSError) as exc:
        st.error(f"Nothing was started: {exc}")
        return
    st.session_state["tn_watch"] = run_dir.name
    st.success(f"Started run `{run_dir.name}`. The command: `{' '.join(TF.build_command(form, run_dir)[1:])}`")
