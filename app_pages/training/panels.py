"""The Training page's panels as Streamlit renderers: the watched run's live view (header, progress and curves),
its control buttons, and the overlaid curves of several runs. The words for a run's state and progress are in
:mod:`app_pages.training.run_view`; the page decides which fragment polls which panel.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app_pages.training.run_view import progress, when
from charts import training as VT
from launching import launch as L
from training import runs as R
from ui.checkpoints import checkpoint_roots
from ui.widgets import show_figure


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
    if state == "starting":  # status.json is still the previous leg's (or none): its clock says nothing yet
        done, line = None, f"step {status['step']} · the trainer is loading its data and model"
    else:
        done = progress(status, R.read_train_args(run_dir).get("max_minutes"), live=state in L.LIVE_STATES)
        line = done[1] if done else f"step {status['step']}"
    st.markdown(
        f"**{run_dir.name}** — state **{state}** · {line}"
        + (
            f" · updated {when(status['updated'], seconds=True)}"
            if when(status.get("updated")) and state != "starting"
            else ""
        )
    )
    if done:
        st.progress(done[0])  # its words are in the line above
    if state == "failed":
        st.error(f"The run failed: {status.get('error') or 'the trainer process is gone (killed?)'}")
        tail = R.log_tail(run_dir)
        if tail:
            st.code(tail, language=None)
    if not metrics:
        st.info("No metrics yet: the trainer is preparing the data and tokenizer.")
        return state
    c1, c2 = st.columns(2)
    chart(
        c1, metrics, {"train loss": "loss", "valid loss": "valid_loss"}, "Loss", "cross-entropy (nats/token)", "ch_loss"
    )
    if R.run_arch(run_dir) == "decoder-only":  # a language model: no translation to score
        chart(
            c2,
            metrics,
            {"valid perplexity": "valid_ppl"},
            "Validation perplexity (exp of the loss)",
            "perplexity",
            "ch_ppl",
            log_y=True,
        )
    else:
        chart(
            c2,
            metrics,
            {"BLEU": "valid_bleu", "chrF": "valid_chrf"},
            "Validation BLEU / chrF",
            "score (0–100)",
            "ch_bleu",
            score=True,
        )
    c1, c2, c3 = st.columns(3)
    chart(c1, metrics, {"learning rate": "lr"}, "Learning rate (warmup, then 1/√step)", "learning rate", "ch_lr")
    chart(c2, metrics, {"tokens/s": "tokens_per_s"}, "Throughput", "tokens / second", "ch_tps")
    chart(c3, metrics, {"grad norm": "grad_norm"}, "Gradient norm (before clipping)", "norm", "ch_gn")
    return state


def _export(run_dir: Path) -> None:
    """Copy the run's best/ into the picker's checkpoint folder. A button callback runs before the script, so the
    sidebar's picker (drawn by app.py before this page) already lists the copy; done in the page's body, the copy
    came after the picker had been drawn, and it appeared only after a reload."""
    try:
        dest = L.export_best(run_dir, checkpoint_roots()[0])
        st.session_state["tn_exported"] = (
            "success",
            f"Copied best/ to `checkpoints/{dest.name}`: pick “{dest.name}” in the sidebar's checkpoint "
            "list to open it on the other pages.",
        )
    except (L.LaunchError, OSError) as exc:
        st.session_state["tn_exported"] = ("error", str(exc))


def run_controls(run_dir: Path, root: Path, state: str) -> None:
    """Stop, Resume, Delete (asks to confirm) and "Open in explorer" for the watched run ``run_dir`` under the runs
    folder ``root``, drawn for its ``state`` (:func:`launching.launch.run_state`). Errors from the launcher are shown
    on the page, never raised."""
    watched = run_dir.name
    c1, c2, c3, c4 = st.columns(4)
    if c1.button(
        "Stop",
        disabled=state != "running",
        help="Graceful: saves last/ and exits"
        + (" (enabled once the trainer has loaded its data and runs)" if state == "starting" else ""),
    ):
        L.stop(run_dir)
        st.toast("Stop requested: the run saves last/ and ends within a step or an evaluation.")
    leg_minutes = R.read_train_args(run_dir).get("max_minutes")
    if c2.button(
        "Resume",
        disabled=not L.can_resume(run_dir) or L.active_run(root) is not None,
        help="Continue exactly where last/ left off: the steps go on towards the run's max steps"
        + (
            f"; its {leg_minutes:g}-minute limit counts again, for this new leg (the progress line "
            "then shows this leg's minutes and the run's total)"
            if leg_minutes
            else ""
        ),
    ):
        try:
            L.resume(run_dir, root)
            st.rerun()
        except L.LaunchError as exc:
            st.error(str(exc))
    no_status = R.read_status(run_dir) is None and R.recently_written(run_dir)
    if no_status:
        st.caption(
            "This run has no status.json but was written to in the last minutes: it may be a CLI run "
            "of an older trainer still going, so Delete is off."
        )
    cannot_delete = state in ("running", "starting") or no_status
    if c3.button("Delete", disabled=cannot_delete, help="Asks to confirm, then removes the run's folder"):
        st.session_state["tn_delete"] = watched
    has_best = (run_dir / "best" / "config.json").is_file()
    c4.button(
        "Open in explorer",
        disabled=not has_best,
        on_click=_export,
        args=(run_dir,),
        help="Copies best/ to checkpoints/<run name>, where the sidebar's checkpoint picker lists it",
    )
    # One click removed a run with all its checkpoints: the click only asks, a second button does it.
    if st.session_state.get("tn_delete") == watched and not cannot_delete:
        st.warning(
            f"Delete run `{watched}`: its folder with every checkpoint, curve and attention snapshot? "
            "This cannot be undone."
        )
        d1, d2, _ = st.columns([1, 1, 4])
        if d1.button("Confirm delete", type="primary"):
            try:
                L.delete(run_dir)
                for key in ("tn_delete", "tn_watch"):
                    st.session_state.pop(key, None)
                st.rerun()
            except L.LaunchError as exc:
                st.error(str(exc))
        if d2.button("Cancel"):
            st.session_state.pop("tn_delete", None)
            st.rerun()
    exported = st.session_state.pop("tn_exported", None)
    if exported:
        (st.success if exported[0] == "success" else st.error)(exported[1])
    st.caption(
        "“Open in explorer” copies the run's best/ checkpoint into `checkpoints/<run name>`, so the "
        "sidebar picker of the other pages lists it."
    )


def compare_runs(root: Path, chosen: list[str], x: str) -> None:
    """Overlaid curves of the ``chosen`` runs under ``root`` against ``x`` (a key of :data:`charts.run_metrics.X_AXES`);
    a run that vanished or has no metrics yet is named and left out."""
    if not chosen:
        st.caption("Pick runs above to overlay their training curves.")
        return
    records: dict[str, list[dict]] = {}
    for name in chosen:
        folder = root / name
        recs = R.read_metrics(folder)
        if not folder.is_dir():
            st.info(
                f"Run `{name}` is no longer there (deleted or moved since the list of runs was read); "
                "it is left out of the charts."
            )
        elif not recs:
            st.info(
                f"Run `{name}` has no metrics yet (its first line comes after `--log-every` steps); "
                "it is left out of the charts."
            )
        else:
            records[name] = recs
    if not records:
        return
    figs = VT.compare_figures(records, x=x, styles=VT.run_styles(chosen))  # colours by selection: stable
    st.caption(
        "Training loss includes the run's label smoothing and is averaged since the previous log line; "
        "validation loss is plain cross-entropy on held-out sentences: compare training with training and "
        "validation with validation."
    )
    metrics = list(VT.METRICS)
    for i in range(0, len(metrics), 2):
        cols = st.columns(2)
        for col, metric in zip(cols, metrics[i : i + 2], strict=False):
            show_figure(figs[metric], where=col, key=f"tn_chart_cmp_{metric}")
