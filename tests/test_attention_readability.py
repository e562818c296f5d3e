"""The Attention page's charts as a new user reads them at 1280×720: masked cells one grey (no line through the
``<bos>`` row), every key and query labelled without overlaps on a long sentence (smaller type or tiers, never
every other one), axis titles clear of the labels, Summaries with line-tall rows, the Translate alignment's source
labels whole and apart, word-level titles that are not cut off, and one colour range for the ablation sweep's maps.

Figure-level checks on synthetic weights (fast), and one ``AppTest`` run of the page with the shipped decoder-only
checkpoint (``checkpoints/brown-lm``), every map of which is masked. The label checks use the plot widths measured
in Chromium at 1280×720 with the sidebar open, not the figures' own layout estimates, so they test the estimates.
"""

from __future__ import annotations

import json
import math
import re
from html import escape as html_escape
from pathlib import Path

import numpy as np
import pytest
import torch

from viz.attention import ALIGN_PX, ALIGN_ROW_HEAD_EM, alignment_html, attention_heatmap, causal_blank, heatmap_fits
from viz.attention_views import difference_heatmap, token_bar_figure
from viz.grid import model_grid_figure
from viz.head_stats import head_stat_heatmap, sweep_heatmaps
from viz.labels import KIND_TITLES, view_title
from viz.theme import HALF_PX, LINE_EM, MASKED_BG, PAGE_PX, SMALL_TOKEN, TITLE_CHARS, TITLE_STANDOFF, title_chars

ROOT = Path(__file__).resolve().parent.parent

#: Plot-area widths (px) measured in Chromium at 1280×720 (sidebar open), rounded down: a heatmap in one of two
#: columns (7-character row labels), a page-wide one, the page-wide difference map (its colour bar's title is
#: wider), one panel of a 4-head model grid, a half-width bar chart.
HALF_HEATMAP_PX = 260
PAGE_HEATMAP_PX = 680
DIFF_HEATMAP_PX = 640
GRID_PANEL_PX = 160
HALF_BARS_PX = 340


def causal_weights(n: int, seed: int = 0) -> torch.Tensor:
    """``[n, n]`` rows summing to 1 over the keys up to the query (a masked self-attention map)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, n, generator=g).masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), -torch.inf)
    return torch.softmax(scores, -1)


def pieces(n: int) -> list[str]:
    """``n`` pieces as a real sentence has them: ``<bos>`` and word starts up to 7 characters."""
    words = ["▁Alice", "▁went", "▁to", "▁the", "▁market", ".", "▁She", "▁bo", "ught", "▁apples"]
    return ["<bos>"] + [words[i % len(words)] for i in range(n - 1)]


def axes(fig) -> list:
    layout = fig.layout
    return [layout[name] for name in layout if name.startswith(("xaxis", "yaxis"))]


def assert_ticks_apart(axis, plot_px: float, n_cells: int) -> None:
    """No two neighbouring tick labels of ``axis`` overlap in a plot ``plot_px`` long holding ``n_cells`` cells.

    Level labels need half of each one's width between their ticks (0.6 em a monospace character); turned ones
    need a line (1.2 em) across their slant: ``1.2 em / |sin angle|`` along the axis."""
    values, texts = list(axis.tickvals), list(axis.ticktext)
    size = axis.tickfont.size
    angle = axis.tickangle or 0
    cell = plot_px / n_cells
    for a, b, ta, tb in zip(values, values[1:], texts, texts[1:], strict=False):
        if angle == 0:
            need = (len(ta) + len(tb)) / 2 * 0.6 * size
        else:
            need = 1.2 * size / abs(math.sin(math.radians(angle)))
        assert (b - a) * cell >= need, (angle, a, b, (b - a) * cell, need)


# --- masked cells ---------------------------------------------------------------------------------------------
def test_masked_cells_are_one_grey_with_no_line_through_the_bos_row():
    """A dark line ran across the <bos> row through the masked area of every masked map: the axes' zero lines,
    drawn under the cells, showed through the empty (masked) cells of row 0 and through the gaps between cells."""
    n = 6
    labels = pieces(n)
    w = causal_weights(n)
    figures = {
        "heatmap": attention_heatmap(w, labels, labels, causal=True, title="Decoder masked self-attention"),
        "rollout": attention_heatmap(w, labels, labels, causal=True, zmax=None, title="Rollout"),
        "grid": model_grid_figure(torch.stack([torch.stack([w, w])] * 2), labels, labels, causal=True),
        "difference": difference_heatmap(
            causal_blank(w.numpy()), causal_blank(causal_weights(n, 1).numpy()), labels, labels
        ),
    }
    for name, fig in figures.items():
        assert fig.layout.plot_bgcolor == MASKED_BG, name  # empty cells show the one masked grey
        for axis in axes(fig):
            assert axis.zeroline is False and axis.showgrid is False, (name, axis.plotly_name)
        z = np.asarray(fig.data[0].z, dtype=float)
        assert np.isnan(z[0, 1:]).all() and not np.isnan(z[:, 0]).any(), name  # <bos> sees itself only


# --- key labels -------------------------------------------------------------------------------------------------
def label_tiers(fig) -> list:
    """The x axes that write token labels: ``xaxis`` and the tiers that overlay it (not the hover's axis, which
    writes none)."""
    layout = fig.layout
    return [
        layout[n]
        for n in sorted(layout)
        if n.startswith("xaxis")
        and (n == "xaxis" or layout[n].overlaying == "x")
        and layout[n].showticklabels is not False
    ]


def assert_every_key_labelled(fig, plot_px: float, n: int) -> None:
    """Each of the ``n`` keys is written once, over the tiers, at :data:`SMALL_TOKEN` px or more, and no two labels
    of a tier overlap in a plot ``plot_px`` wide; a tier further out draws its ticks past the tiers above it."""
    tiers = label_tiers(fig)
    assert sorted(v for axis in tiers for v in axis.tickvals) == list(range(n))
    for t, axis in enumerate(tiers):
        assert axis.tickangle in (0, -90) and axis.tickfont.size >= SMALL_TOKEN
        assert_ticks_apart(axis, plot_px, n)
        if t:
            above = max(len(x) for x in tiers[t - 1].ticktext) * 0.6 * axis.tickfont.size
            assert axis.ticklen - (tiers[t - 1].ticklen or 0) >= above  # a leader line past the labels above


@pytest.mark.parametrize("n", [21, 25, 26, 40])
def test_every_key_of_a_long_sentence_is_labelled_without_overlaps(n):
    """Key labels collided on 25-token sentences at −45°; then they were thinned, and a 21-piece source showed 11 of
    its keys: the others only on hover, which no one in a lecture room has. Every key now keeps its label: in
    smaller type, or taking turns over two or three tiers."""
    labels = pieces(n)
    w = causal_weights(n)
    half = attention_heatmap(w, labels, labels, causal=True, title="Heads · one of two columns")
    full = attention_heatmap(w, labels, labels, causal=True, height=560, width=PAGE_PX, title="the opened head")
    diff = difference_heatmap(w.numpy(), causal_weights(n, 1).numpy(), labels, labels, title="Difference")
    bars = token_bar_figure(w[-1], labels, title="What “.” attends to")
    for fig, plot_px in (
        (half, HALF_HEATMAP_PX),
        (full, PAGE_HEATMAP_PX),
        (diff, DIFF_HEATMAP_PX),
        (bars, HALF_BARS_PX),
    ):
        if n <= 26 or plot_px > HALF_HEATMAP_PX:  # 40 keys in a half column: heatmap_fits says draw it wider
            assert_every_key_labelled(fig, plot_px, n)
    assert heatmap_fits(labels[:21], labels[:21], HALF_PX) and not heatmap_fits(pieces(80), pieces(80), HALF_PX)


def test_every_query_row_is_labelled_with_a_line_of_room():
    """ "Heads forming" drew 13 queries in a 260-px chart and labelled 7 of them; a page-wide map of 60 queries was
    capped at 900 px. The chart now grows until each row is a line of its labels' type."""
    for n, height, width in ((13, 260, HALF_PX), (60, 560, PAGE_PX)):
        labels = pieces(n)
        fig = attention_heatmap(
            causal_weights(n), labels, labels, causal=True, title="layer 1 · head 1", height=height, width=width
        )
        axis = fig.layout.yaxis
        assert list(axis.tickvals) == list(range(n)) and list(axis.ticktext) == labels
        size = axis.tickfont.size
        under = max(len(t) for t in labels) * 0.6 * size + 10 + 24  # the key labels and the axis title
        assert fig.layout.height - fig.layout.margin.t - under >= n * LINE_EM * size


def test_axis_titles_stand_off_from_turned_labels():
    """The y title ("queries (attending) ↓") touched the row labels and the x title the upright key labels
    (token bars: "_children" ran into "keys"): Plotly's own standoff. Every token axis now sets one."""
    labels = pieces(21)
    w = causal_weights(21)
    figures = [
        attention_heatmap(w, labels, labels, causal=True),
        token_bar_figure(w[-1], labels, title="t"),
        difference_heatmap(w.numpy(), causal_weights(21, 1).numpy(), labels, labels),
    ]
    for fig in figures:
        titled = [a for a in axes(fig) if a.title.text]
        assert len(titled) == 2
        assert all(a.title.standoff is not None and a.title.standoff >= TITLE_STANDOFF for a in titled)


def test_model_grid_labels_every_key_or_none():
    """The grid's bottom row wrote every key at −60° whenever heads × keys ≤ 64, later every other or third one.
    Now every key, where a panel's columns hold them (a little smaller type at most), else none: the head opened
    under the grid names them all."""
    for heads, n, shown in ((4, 16, False), (4, 10, True), (2, 24, False), (2, 12, True)):
        labels = pieces(n)
        attn = torch.stack([torch.stack([causal_weights(n, s) for s in range(heads)])] * 3)
        fig = model_grid_figure(attn, labels, labels, causal=True)
        bottom = fig.layout[f"xaxis{2 * heads + 1}"]
        assert bool(bottom.showticklabels) == shown, (heads, n)
        if shown:
            assert list(bottom.tickvals) == list(range(n))
            assert_ticks_apart(bottom, GRID_PANEL_PX * 4 / heads, n)


def test_summaries_rows_are_a_line_tall_with_only_a_title_between_layers():
    """Summaries (mean and max over heads, six layers) squashed each map's rows to ~13 px under 136-px gaps: the
    gap between layers was a share of the whole figure."""
    n, layers = 13, 6
    labels = pieces(n)
    stack = torch.stack([torch.stack([causal_weights(n), causal_weights(n, 1)])] * layers)
    fig = model_grid_figure(
        stack,
        labels,
        labels,
        causal=True,
        col_names=["mean over heads", "max over heads"],
        title="Decoder masked self-attention · mean and max over heads, per layer",
    )
    plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    domains = [fig.layout[f"yaxis{2 * r + 1 if r else ''}"].domain for r in range(layers)]
    for d in domains:
        assert (d[1] - d[0]) * plot_h / n >= LINE_EM * 14
    for upper, lower in zip(domains, domains[1:], strict=False):
        assert (upper[0] - lower[1]) * plot_h <= 40


def test_alignment_labels_of_a_26_piece_source_take_turns_and_are_whole():
    """Translate at 1280 px: the 26 upright source labels of the alignment map, in ~11 px columns, ran into each
    other, and long pieces were cut at 9 em. They now take turns over tiers, so that neighbours in a tier are a line
    apart, each written whole."""
    src = pieces(25) + ["<eos>"]
    src[5] = "▁Vergangenheitsbewältigung"
    html = alignment_html(torch.softmax(torch.randn(4, 26), -1), ["▁Ob", "wohl", "▁es", "▁reg"], src)
    heads = re.findall(r'<th class="ae-align-col" data-tier="(\d)"[^>]*>(.*?)</th>', html)
    assert [re.sub(r"<[^>]+>", "", label) for _, label in heads] == [html_escape(t) for t in src]
    tiers = [int(t) for t, _ in heads]
    assert tiers == [j % (max(tiers) + 1) for j in range(26)] and max(tiers) >= 1
    cell = (ALIGN_PX - ALIGN_ROW_HEAD_EM * 14) / 26
    assert (max(tiers) + 1) * cell >= LINE_EM * 14
    assert "max-height" not in html and "text-overflow" not in html
    short = alignment_html(torch.ones(1, 4) / 4, ["▁Mein"], ["▁My", "▁brother", "▁lives", "<eos>"])
    assert set(re.findall(r'data-tier="(\d)"', short)) == {"0"}  # a short source keeps one row of labels


# --- titles -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(KIND_TITLES))
def test_word_level_titles_fit_a_half_width_chart(kind):
    """ "Cross-attention (decoder → encoder) · layer 3 · head 1 · words" (62 characters) was cut off at 1280 px:
    Plotly never wraps a title. Each line now fits, and the top margin holds every line."""
    n = 5
    labels = pieces(n)
    for head in (0, "mean"):
        title = view_title(kind, 2, head, words=True)
        fig = attention_heatmap(causal_weights(n), labels, labels, causal=True, title=title)
        lines = fig.layout.title.text.split("<br>")
        assert " ".join(lines).replace("  ", " ") == title
        assert max(len(line) for line in lines) <= TITLE_CHARS, lines
        assert fig.layout.margin.t >= 24 * len(lines) + 24
        wide = attention_heatmap(causal_weights(n), labels, labels, causal=True, title=title, width=PAGE_PX)
        assert max(len(line) for line in wide.layout.title.text.split("<br>")) <= title_chars(PAGE_PX)


# --- the ablation sweep -----------------------------------------------------------------------------------------
def test_the_sweep_maps_share_one_colour_range():
    """The sweep's three heatmaps each ran from −(their own largest drop) to +: a head that barely mattered in one
    kind was as red as the head that mattered most in another."""
    drops = {
        "encoder": torch.tensor([[0.02, -0.01], [0.05, 0.0]]),
        "decoder": torch.tensor([[1.5, 0.3], [-0.2, 0.1]]),
        "cross": torch.tensor([[4.0, -0.5], [0.7, 0.2]]),
    }
    figures = sweep_heatmaps(drops, {k: k.title() for k in drops})
    ranges = {(f.data[0].zmin, f.data[0].zmax) for f in figures}
    assert len(ranges) == 1 and next(iter(ranges)) == pytest.approx((-4.0, 4.0))
    assert [f.layout.title.text for f in figures] == ["Encoder", "Decoder", "Cross"]
    assert all(f.data[0].zmid == 0 for f in figures)
    # a single map still spans its own largest drop
    alone = head_stat_heatmap(drops["encoder"], "drop (nats)", diverging=True)
    assert (alone.data[0].zmin, alone.data[0].zmax) == pytest.approx((-0.05, 0.05))


# --- the page, with a decoder-only model ------------------------------------------------------------------------
streamlit_testing = pytest.importorskip("streamlit.testing.v1")
BROWN = ROOT / "checkpoints" / "brown-lm"


@pytest.mark.skipif(not (BROWN / "model.safetensors").is_file(), reason="checkpoints/brown-lm is missing")
def test_every_masked_map_of_the_decoder_only_model_has_no_line_through_it(monkeypatch):
    """Every brown-lm map is masked: the heads, the model grid's summaries and the rollout draw no axis line where
    the masked cells are empty."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_CHECKPOINTS", raising=False)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)
    at = streamlit_testing.AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["ckpt"] = "brown-lm"
    at.switch_page("app_pages/attention/attention.py").run()
    seen = 0
    for tab in ("Heads", "Summaries"):
        at.session_state["at_tab"] = tab
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        for chart in at.get("plotly_chart"):
            spec = json.loads(chart.proto.spec)
            if not any(t["type"] == "heatmap" for t in spec["data"]):
                continue
            seen += 1
            assert spec["layout"]["plot_bgcolor"] == MASKED_BG
            for name, axis in spec["layout"].items():
                if name.startswith(("xaxis", "yaxis")):
                    assert axis.get("zeroline") is False, (tab, spec["layout"].get("title"), name)
    assert seen >= 6  # 4 heads, the mean / max grid, the rollout


def test_the_head_statistics_caption_says_which_rows_each_column_averages():
    """The caption said every number averages every query row, while *previous* leaves out the first row (it has
    no key before it): a *previous* of 0.985 stood beside a *max* of 0.956 and read as an error."""
    from app_pages.attention.reading_tabs import stats_caption
    from reading.analysis import head_statistics

    weights = torch.tensor([[1 / 3, 1 / 3, 1 / 3], [1.0, 0, 0], [0, 1.0, 0]])[None, None]  # rows 1, 2: the previous
    stats = head_statistics(weights)
    assert float(stats["previous"]) == 1.0 > float(stats["max"])  # the case the caption must make readable
    for kind in ("encoder", "decoder", "cross"):
        caption = stats_caption(kind)
        assert "averaged over the query rows" not in caption and "every query row" in caption
        assert "*previous* only those that have a key one position before (never the first row)" in caption
        assert "*same* only the rows that have a key at their own position" in caption
        assert ("*eos*" in caption) == (kind != "decoder") and "higher than *max*" in caption
