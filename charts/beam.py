"""The beam search as a tree, step by step: every candidate the search considered, joined to its parent beam, the
kept ones blue, the pruned grey, the best hypothesis' path in the accent colour. A pure function from a finished
search (or any object shaped like :class:`decoding.beam.BeamResult`) to a Plotly figure; no Streamlit, no model.
"""

from __future__ import annotations

import html
from typing import Callable

import plotly.graph_objects as go

from viz.theme import ACCENT, FONT, GREY, SUBTLE, TITLE_FONT, TOKEN_FONT, WHITE
from viz.theme import STEEL as BLUE
from viz.token_labels import display_token, plotly_escape, shorten

#: Between a newest beam node's token and its score: with one space ". -1.70" and "▁groß -2.00" ran together (SVG
#: folds ordinary spaces into one; no-break spaces keep their width).
SCORE_GAP = "\u00a0" * 3
#: Width (px) of the beam tree's plot area at 1280×720 (the Decoding lab's main column, less the axis titles).
BEAM_PLOT_PX = 560


def beam_tree_figure(
    result,
    id_to_token: Callable[[int], str],
    eos_id: int = 2,
    title: str = "",
    n_steps: int | None = None,
    ranks: int | None = None,
) -> go.Figure:
    """Beam search as a tree: x = step, y = rank among that step's candidates (best on top).

    Every candidate the search considered is a node labelled with its token, joined to its parent beam; kept
    candidates are blue (a square when it ended the hypothesis with ``<eos>``), pruned ones grey; the path of the
    best hypothesis is drawn in the accent colour. The newest step's nodes also carry their cumulative
    log-probability, on one line to the right of the node, where the next steps' columns are still empty.

    Args:
        result: a :class:`decoding.beam.BeamResult` (or any object with ``hypotheses`` and ``steps``:
            ``steps[t]`` = list of ``(parent_index, token_id, cumulative_log_prob, kept)``, ``parent_index``
            indexing the open beams of step ``t - 1``; each hypothesis has ``tokens``).
        id_to_token: id → BPE piece.
        eos_id: the end-of-sequence id (candidates with it close a hypothesis and have no children).
        n_steps / ranks: steps (x) and ranks (y) the axes span, at least those shown, so that a tree shown step
            by step grows in place (e.g. the search's length and 2 × the beam width).

    Returns:
        A figure whose trace named ``"candidates"`` has one point per candidate (``sum(len(s) for s in steps)``)
        and whose trace named ``"best path"`` joins the root to the best hypothesis' last token.
    """
    steps = [list(s) for s in result.steps]
    # Open beams of a step = kept candidates that are not <eos>, in order (the search's new_beams order).
    parents, seqs, node_xy = [], [], []
    prev_open = [(0.0, 0.0)]
    prev_seqs: list[tuple[int, ...]] = [()]
    for t, cands in enumerate(steps):
        open_xy, open_seqs = [], []
        for j, (parent, token, _lp, kept) in enumerate(cands):
            parent = int(parent)
            p_xy = prev_open[parent] if parent < len(prev_open) else (float(t), 0.0)
            seq = (prev_seqs[parent] if parent < len(prev_seqs) else ()) + (int(token),)
            parents.append(p_xy)
            seqs.append(seq)
            node_xy.append((float(t + 1), float(j)))
            if kept and int(token) != eos_id:
                open_xy.append((float(t + 1), float(j)))
                open_seqs.append(seq)
        prev_open, prev_seqs = open_xy, open_seqs
    flat = [(t, j, c) for t, cands in enumerate(steps) for j, c in enumerate(cands)]
    best = tuple(int(i) for i in result.hypotheses[0].tokens) if result.hypotheses else ()
    on_best = [
        len(seq) <= len(best) and seq == best[: len(seq)] and c[3] for seq, (_, _, c) in zip(seqs, flat, strict=True)
    ]

    fig = go.Figure()

    def edges(select, color, width, dash, name):
        xs, ys = [], []
        for k, (px, py) in enumerate(parents):
            if select(k):
                xs += [px, node_xy[k][0], None]
                ys += [py, node_xy[k][1], None]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=name,
                hoverinfo="skip",
                showlegend=False,
                line=dict(color=color, width=width, dash=dash),
            )
        )

    edges(lambda k: not flat[k][2][3], GREY, 1, "dot", "pruned edges")
    edges(lambda k: flat[k][2][3] and not on_best[k], BLUE, 1.6, "solid", "kept edges")
    # The best path as one polyline from the root.
    path = [(0.0, 0.0)] + [node_xy[k] for k in range(len(flat)) if on_best[k]]
    fig.add_trace(
        go.Scatter(
            x=[p[0] for p in path],
            y=[p[1] for p in path],
            mode="lines",
            name="best path",
            hoverinfo="skip",
            showlegend=False,
            line=dict(color=ACCENT, width=4),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[0],
            y=[0],
            mode="markers+text",
            name="root",
            text=["&lt;bos&gt;"],
            textposition="top center",
            marker=dict(size=14, color=SUBTLE, symbol="diamond"),
            hovertemplate="start: &lt;bos&gt;<extra></extra>",
            showlegend=False,
        )
    )
    colors, symbols, texts, hover, places = [], [], [], [], []
    last = len(steps) - 1
    for k, (t, j, (parent, token, lp, kept)) in enumerate(flat):
        piece = plotly_escape(display_token(id_to_token(int(token))))
        done = int(token) == eos_id
        colors.append(ACCENT if on_best[k] else (BLUE if kept else GREY))
        symbols.append("square" if done else "circle")
        # Labels of neighbouring steps used to run into each other once the tree was wide: one short line per
        # node, above the node on even steps and below it on odd ones. The newest step's label also has the
        # score, on the same line to the right, where the column has no neighbour yet: under the node, the score
        # of one rank ran into the token of the next once the beam was wide (hover and the step's table have
        # every number).
        label = plotly_escape(shorten(display_token(id_to_token(int(token))), 8))
        texts.append(f"{label}{SCORE_GAP}{lp:.2f}" if t == last else label)
        places.append("middle right" if t == last else "top center" if t % 2 == 0 else "bottom center")
        state = ("finished (ends with &lt;eos&gt;)" if done else "kept as a beam") if kept else "pruned"
        hover.append(
            f"step {t + 1}, rank {j + 1}: <b>{piece}</b><br>cumulative log p = {lp:.3f}<br>"
            f"parent beam {int(parent) + 1}<br>{state}"
        )
    fig.add_trace(
        go.Scatter(
            x=[p[0] for p in node_xy],
            y=[p[1] for p in node_xy],
            mode="markers+text",
            name="candidates",
            text=texts,
            textposition=places,
            textfont=dict(TOKEN_FONT, size=13),
            cliponaxis=False,
            marker=dict(size=11, color=colors, symbol=symbols, line=dict(color=WHITE, width=1)),
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
            showlegend=False,
        )
    )
    for name, color, symbol in (
        ("kept beam", BLUE, "circle"),
        ("finished (<eos>)", BLUE, "square"),
        ("pruned", GREY, "circle"),
        ("best hypothesis", ACCENT, "circle"),
    ):
        fig.add_trace(
            go.Scatter(x=[None], y=[None], mode="markers", name=name, marker=dict(size=11, color=color, symbol=symbol))
        )
    width = max(max((len(s) for s in steps), default=1), ranks or 0)
    n_steps = max(len(steps), n_steps or 0)
    # Room right of the last step for the newest labels (token and score, 13 px monospace), in steps.
    newest = max((len(html.unescape(t)) for t, (tt, _, _) in zip(texts, flat, strict=True) if tt == last), default=0)
    label_px = newest * 0.6 * 13 + 16
    right = max(0.5, label_px * (n_steps + 1.2) / max(BEAM_PLOT_PX - label_px, 1.0))
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=TITLE_FONT),
        font=FONT,
        plot_bgcolor=WHITE,
        height=200 + 46 * width,
        margin=dict(l=50, r=20, t=60 if title else 30, b=90),
        legend=dict(orientation="h", yref="container", y=0.0, yanchor="bottom", x=0.0),
    )
    fig.update_xaxes(
        title_text="step",
        tickvals=list(range(n_steps + 1)),
        range=[-0.7, n_steps + right],
        showgrid=False,
        zeroline=False,
    )
    fig.update_yaxes(
        title_text="rank at that step",
        range=[width - 0.5, -0.9],
        tickvals=list(range(width)),
        ticktext=[str(i + 1) for i in range(width)],
        showgrid=False,
        zeroline=False,
    )
    return fig
