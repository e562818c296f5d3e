"""Training: launch a run of ``python -m trainer.train`` from a form, watch its curves live, stop / resume / delete
it, replay how the attention heads formed, and open the result in the explorer."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app_pages.training import form as training_form
from app_pages.training import panels
from app_pages.training.heads_forming import show_heads_forming
from app_pages.training.run_view import table_row
from charts import training as VT
from charts.run_metrics import X_AXES
from launching import launch as L
from training import runs as R
from ui import url
from ui.checkpoints import DEFAULT_CHECKPOINT, checkpoint_roots
from ui.page_state import TRAINING
from ui.widgets import show_figure, show_table

st.title("Training")
st.caption(
    "Train a small English → German Transformer here (or a decoder-only language model on the same "
    "sentences or on the Brown corpus's English prose) and watch it learn. Each run is the ordinary "
    "`python -m trainer.train` CLI running in the background; its folder under `runs/` holds the curves, "
    "log-spaced checkpoints and attention snapshots."
)


@st.fragment
def training_page() -> None:
    """The page below the sidebar, as a fragment: a pick, a button or a form reruns this, not the app around it
    (the navigation, the sidebar's picker and summary). The runs table, the watched run and the compared curves are
    fragments of their own inside it, which poll while a run lives."""
    root = R.runs_root()
    card = R.read_card(checkpoint_roots()[0] / DEFAULT_CHECKPOINT)
    legs = card.get("legs")
    if isinstance(legs, list) and legs:
        with st.expander("How the shipped translator was trained: its scores along the way"):
            labels = card.get("legs_labels")
            show_figure(VT.legs_figure(legs, labels=labels if isinstance(labels, dict) else None), key="tn_chart_legs")
            # The card says what its points are (which valid set, which legs), so a new lineage needs no new page text.
            st.caption(
                str(card.get("legs_note") or "chrF of greedy translations after each training leg.")
                + " Every run behind each point: the model card, checkpoints/en-de/README.md."
            )

    if L.demo_mode():
        st.info(
            "This is the hosted demo: training is switched off here, runs are shown read-only. "
            "Clone the repository to train your own model (`make run`, then this page)."
        )
    else:
        with st.expander("Start a new run", expanded=not L.list_runs(root)):
            training_form.launch_form(root)

    # --- runs table -------------------------------------------------------------------------------------------
    runs = L.list_runs(root)
    st.subheader("Runs")
    for why in L.refused_runs(root):  # a folder named like a path, or a link out of the runs folder: never opened
        st.warning(f"Left out of the runs: {why}.")
    if not runs:
        st.info(f"No runs yet under `{root}`.")
        st.stop()
    names = [r["name"] for r in runs]
    live = sorted(r["name"] for r in runs if r["state"] in L.LIVE_STATES)
    first_rows = {"rows": runs}  # the fragment's first draw uses the rows just read; its reruns read them afresh

    @st.fragment(run_every=2 if live else None)
    def runs_table() -> None:
        """The runs table, re-read every 2 s while a run lives: drawn once with the page, it said "step 0 · loss None"
        for a run the live view showed at step 620. A run that appears, vanishes, starts or ends redraws the page
        (the picker below and the buttons depend on it)."""
        rows = first_rows.pop("rows", None) or L.list_runs(root)
        # a static table whose cells wrap: the data grid cut its last columns (started, updated) off at 1280 px
        show_table(pd.DataFrame([table_row(r) for r in rows]), wrap=True)
        if [r["name"] for r in rows] != names or sorted(r["name"] for r in rows if r["state"] in L.LIVE_STATES) != live:
            st.rerun()

    runs_table()

    def _picked(key: str) -> None:
        st.session_state["tn_watch"] = st.session_state[key]

    # "tn_watch" is the run to watch: the person's last pick (kept across pages) or the run just launched. The
    # picker's key names that run, so a new one (a launch, a deleted run) gets a new picker showing it. A keyed
    # selectbox ignores a new index (after a launch it stayed on the previous run), and writing the new run into its
    # key from here races with the polling fragments, whose requests carry the value the browser had before.
    wanted = st.session_state.get("tn_watch")
    wanted = wanted if wanted in names else names[0]
    pick_key = TRAINING.watch.sub("pick", wanted)
    watched = st.selectbox(
        "Watch run", names, index=names.index(wanted), key=pick_key, on_change=_picked, args=(pick_key,)
    )
    st.session_state["tn_watch"] = watched
    run_dir = root / watched

    # The runs table and the buttons below are drawn with this state; the fragment alone redraws every 2 s while the
    # run lives, so when the run's state changes (starting → running → finished) the whole page must be redrawn, or
    # Stop stays disabled on a running run and the table keeps saying "starting".
    state = L.run_state(run_dir)

    @st.fragment(run_every=2 if state in L.LIVE_STATES else None)
    def watch() -> None:
        if panels.show_run(run_dir) != state:
            st.rerun()

    watch()

    # --- control ----------------------------------------------------------------------------------------------
    if not L.demo_mode():
        panels.run_controls(run_dir, root, state)

    # --- compare runs -----------------------------------------------------------------------------------------
    st.subheader("Compare runs")
    ended = [r["name"] for r in runs if r["state"] in ("finished", "stopped")]
    c1, c2 = st.columns([3, 2])

    def _compare_touched() -> None:
        st.session_state[TRAINING.compare.sub("touched")] = True

    # Preselect the two most recent ended runs until the person picks: also when a run ends while the page is open.
    # The preselection is the widget's default, never a value set for it: the browser writes a bound widget's value
    # into the link only when it differs from the default, and a preselection is nobody's choice. A default counts only
    # when the widget is drawn anew, so a stale preselection (a run has ended since) is dropped first.
    preselected = ended[:2]
    RUNS_KEY = TRAINING.compare.sub("runs")
    chosen_by_person = st.session_state.get(TRAINING.compare.sub("touched")) or "compare" in st.query_params
    if not chosen_by_person and st.session_state.get(RUNS_KEY) != preselected:
        st.session_state.pop(RUNS_KEY, None)
    if chosen_by_person:  # a link's runs (unknown ones dropped with a note), or the person's own choice
        TRAINING.compare.init(
            lambda p: url.choices_param(p, "compare", names, what="runs to overlay"),
            member="runs",
            valid=lambda chosen: set(chosen) <= set(names),
        )
    compared = c1.multiselect(
        "Runs to overlay",
        names,
        default=None if chosen_by_person else preselected,
        key=RUNS_KEY,
        on_change=_compare_touched,
        max_selections=len(VT.PALETTE),
        help="One colour per run, the same on every chart. Preselected: the two most recent runs that have ended; "
        "any other choice is kept in the page address, so a reload or a shared link shows the same runs.",
    )
    TRAINING.compare.put(compared, None if chosen_by_person else preselected, member="runs")
    x_axes = list(X_AXES)
    TRAINING.compare.init(lambda p: url.choice_param(p, "compare_x", x_axes, x_axes[0], what="x axis"), member="x")
    x_axis = c2.radio(
        "x axis",
        x_axes,
        key="tn_compare_x",
        horizontal=True,
        help="Steps compare schedules; tokens seen compares runs with different batch sizes; wall time "
        "compares what each run got for the same time budget.",
    )
    TRAINING.compare.put(x_axis, x_axes[0], member="x")
    states = {r["name"]: r["state"] for r in runs}

    @st.fragment(run_every=10 if any(states.get(n) in L.LIVE_STATES for n in compared) else None)
    def compare_runs(chosen: list[str], x: str) -> None:
        """Overlaid curves of the chosen runs, refreshed every 10 s while one of them trains."""
        panels.compare_runs(root, chosen, x)

    compare_runs(compared, x_axis)

    # --- heads forming ----------------------------------------------------------------------------------------
    st.subheader("Heads forming")

    show_heads_forming(run_dir, live=state in L.LIVE_STATES)


training_page()
