"""Figure builders: shapes, labels, the axis convention and the causal blanking."""

import math
import re

import numpy as np
import pytest
import torch

from charts.next_token import top_tokens_html
from viz.attention import (
    alignment_html,
    attention_heatmap,
    highlight_tokens_html,
    scale_colours,
    tokens_html,
)
from viz.token_labels import display_token


def test_one_word_start_convention_the_tokenizers_own():
    """Tokenization showed ``▁`` and the other pages ``·``; every page now shows the tokenizer's ``▁``."""
    assert display_token("▁Bobby") == "▁Bobby"
    assert display_token("berries") == "berries"
    assert display_token("<eos>") == "<eos>"
    from viz.labels import WORD_START_NOTE

    assert "▁" in WORD_START_NOTE and "·" not in WORD_START_NOTE


def test_heatmap_keeps_duplicate_tokens_apart_and_states_axes():
    w = torch.softmax(torch.randn(3, 4), dim=-1)
    fig = attention_heatmap(w, ["▁the", "▁cat", "▁the"], ["▁the", "▁cat", "▁the", "<eos>"], title="t")
    hm = fig.data[0]
    assert np.asarray(hm.z).shape == (3, 4)
    assert list(hm.y) == [0, 1, 2]  # numeric rows: the two "the" stay two rows
    assert "queries" in fig.layout.yaxis.title.text and "keys" in fig.layout.xaxis.title.text
    assert fig.layout.yaxis.autorange == "reversed"  # first query on top
    # the hover names a cell's query and key from axes that hold every piece, escaped (Plotly writes %{y} as the
    # tick text there): "query <b>▁the</b> (row 2)" for row 2
    assert hm.hovertemplate.startswith("query <b>%{y}</b> (row %{y:d})<br>key <b>%{x}</b> (column %{x:d})")
    x_hover, y_hover = fig.layout[f"xaxis{hm.xaxis[1:]}"], fig.layout[f"yaxis{hm.yaxis[1:]}"]
    assert list(y_hover.ticktext) == ["▁the", "▁cat", "▁the"] and list(y_hover.tickvals) == [0, 1, 2]
    assert list(x_hover.ticktext) == ["▁the", "▁cat", "▁the", "&lt;eos&gt;"] and not x_hover.showticklabels
    assert (x_hover.matches, y_hover.matches, y_hover.autorange) == ("x", "y", "reversed")


def test_a_long_sentences_heatmap_carries_no_string_per_cell():
    n = 128
    w = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    labels = [f"▁piece{i}" for i in range(n)]
    size = len(attention_heatmap(w, labels, labels, causal=True, title="t").to_json())
    assert size < 400_000  # 231 kB; with a hover string per cell it was 2.48 MB


def test_causal_heatmap_blanks_the_future_only():
    w = torch.tril(torch.ones(4, 4))
    w = w / w.sum(-1, keepdim=True)
    z = np.asarray(attention_heatmap(w, list("abcd"), list("abcd"), causal=True).data[0].z, dtype=float)
    assert all(math.isnan(z[i][j]) for i in range(4) for j in range(i + 1, 4))
    assert not any(math.isnan(z[i][j]) for i in range(4) for j in range(i + 1))


def test_heatmap_rejects_labels_that_do_not_fit():
    with pytest.raises(ValueError):
        attention_heatmap(np.ones((2, 3)) / 3, ["a"], ["x", "y", "z"])


def test_alignment_html_is_a_grid_of_weights_with_escaped_labels():
    weights = np.array([[0.1, 0.2, 0.3, 0.4, 0.0], [0.5, 0.5, 0.0, 0.0, np.nan]])
    page = alignment_html(weights, ["▁Das", "<b>"], list("abcd") + ["<eos>"], title="Alignment so far")
    body = page.split("<tbody>")[1].split("</tbody>")[0]
    rows = [re.findall(r'data-w="([^"]+)"', r) for r in body.split("</tr>")[:-1]]
    assert [[float(w) for w in r] for r in rows] == [[0.1, 0.2, 0.3, 0.4, 0.0], [0.5, 0.5, 0.0, 0.0, 0.0]]
    assert page.count('class="ae-align-col"') == 5 and "&lt;eos&gt;" in page and "<b>" not in page
    assert "Alignment so far" in page and "font-size:14px" in page
    newest = body.split("</tr>")[1]
    assert "4px solid #e4572e" in newest and "4px solid #e4572e" not in body.split("</tr>")[0]
    assert "#e4572e" not in alignment_html(weights, ["▁Das", "x"], list("abcde"), current=None)
    with pytest.raises(ValueError):
        alignment_html(weights, ["▁Das"], list("abcde"))


def test_scale_colours_follow_the_attention_scale():
    from viz.theme import ATTENTION_SCALE

    assert scale_colours([0.0, 1.0]) == [ATTENTION_SCALE[0][1], ATTENTION_SCALE[-1][1]]
    assert scale_colours([0.6]) == [ATTENTION_SCALE[-2][1]]  # a stop is hit exactly
    low, nan, zero, high, one = scale_colours([-3, float("nan"), 0.0, 7, 1])
    assert low == nan == zero and high == one
    assert scale_colours([0.5], [[0, "#000000"], [1, "#ffffff"]]) == ["#808080"]  # linear in RGB between stops
    assert scale_colours(np.full((2, 3), 0.6)) == [ATTENTION_SCALE[-2][1]] * 6 and scale_colours([]) == []


def test_highlight_outlines_the_strongest_and_escapes_html():
    html = highlight_tokens_html(["<b>", "▁cat", "▁sat"], [0.1, 0.7, 0.2])
    assert "&lt;b&gt;" in html and "<b>" not in html
    spans = html.split("</span>")
    assert "3px solid" in spans[1] and "3px solid" not in spans[0] and "3px solid" not in spans[2]
    with pytest.raises(ValueError):
        highlight_tokens_html(["a"], [0.5, 0.5])


def test_tokens_html_marks_current_and_handles_empty():
    assert "nothing yet" in tokens_html([])
    html = tokens_html(["▁a", "▁b"], current=1)
    assert html.count("#e4572e") == 1 and html.rindex("#e4572e") > html.index("a</span>")


def test_top_tokens_html_ranks_scales_and_highlights_the_chosen_token():
    html = top_tokens_html(["▁Das", "▁Die", "<b>"], [0.6, 0.3, 0.1], chosen=1, title="Step 1")
    rows = html.split('class="ae-topk-row"')[1:]
    assert len(rows) == 3 and "1. ▁Das" in rows[0] and "60.0%" in rows[0]
    assert "width:60.0%" in rows[0] and "width:30.0%" in rows[1]  # a bar is as long as its probability
    assert "#e4572e" in rows[1] and "#e4572e" not in rows[0] + rows[2]  # the chosen one, in the accent
    assert "&lt;b&gt;" in rows[2] and "<b>" not in html  # pieces are escaped
    assert "Step 1" in html and "no candidates" in top_tokens_html([], [])
    with pytest.raises(ValueError):
        top_tokens_html(["a"], [0.5, 0.5])


def test_colours_and_fonts_are_named_once_in_the_theme():
    """The palette and font stack live in one place, viz/theme.py; figures and pages use the names, not literals."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    literal = re.compile(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b(?!;)|Consolas|Helvetica")
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("viz", "charts", "app_pages", "ui")
        for path in sorted((root / folder).glob("*.py"))
        if path.name != "theme.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert offenders == []


# --- decoding figures readable from the back of the room ---------------------------------------------------------
def test_beam_tree_labels_of_neighbouring_steps_do_not_collide():
    """At later steps the two-line labels of neighbouring steps ran into each other: one short line per node now,
    alternately above and below, and the numbers only on the newest step (on the same line, to the right)."""
    from types import SimpleNamespace

    from charts.beam import beam_tree_figure

    steps = [[(0, 10 + t, -0.5 * t - j, j < 2) for j in range(4)] for t in range(30)]
    result = SimpleNamespace(steps=steps, hypotheses=[SimpleNamespace(tokens=[10 + t for t in range(30)])])
    fig = beam_tree_figure(result, lambda i: f"▁verylongpiece{i}", eos_id=2)
    nodes = next(t for t in fig.data if t.name == "candidates")
    places, texts, xs = list(nodes.textposition), list(nodes.text), list(nodes.x)
    for k in range(len(xs) - 4):
        assert places[k] != places[k + 4]  # the same rank one step later sits on the other side
    older = [t for t, x in zip(texts, xs, strict=True) if x < 30]
    assert all("<br>" not in t and len(t) <= 8 for t in older)
    newest = [(t, p) for t, p, x in zip(texts, places, xs, strict=True) if x == 30]
    assert newest and all(
        "<br>" not in t and p == "middle right" and t.split()[-1].lstrip("-")[0].isdigit() for t, p in newest
    )
    assert nodes.textfont.size >= 13


def test_pipeline_panels_keep_their_axis_labels_apart():
    """The last tick of one panel ran into the first of the next ("0−15")."""
    from types import SimpleNamespace

    from charts.next_token import pipeline_figure

    logits = torch.linspace(-15, 0, 20)
    probs = torch.softmax(logits, -1)
    pipe = SimpleNamespace(
        logits=logits, scaled=logits, probs=probs, final=probs, keep=torch.ones(20, dtype=torch.bool), token_id=19
    )
    fig = pipeline_figure(pipe, lambda i: f"▁t{i}", top=15, temperature=1.0)
    domains = [fig.layout[f"xaxis{'' if i == 1 else i}"].domain for i in range(1, 5)]
    assert all(b[0] - a[1] >= 0.06 for a, b in zip(domains, domains[1:], strict=False))
    assert fig.layout.xaxis.nticks <= 3 and fig.layout.xaxis2.nticks <= 3
    assert fig.layout.xaxis.tickfont.size >= 14 and all(a.font.size >= 14 for a in fig.layout.annotations)


def test_long_titles_are_wrapped_not_cut_off():
    from viz.theme import wrap_title

    assert wrap_title("Cross-attention so far (last decoder layer, mean over heads)").split("<br>") == [
        "Cross-attention so far",
        "(last decoder layer, mean over heads)",
    ]
    title = "Decoder masked self-attention · layer 1 · head 2"
    assert wrap_title(title) == title


def test_kv_cache_figure_text_is_readable_and_its_token_labels_keep_apart():
    """Read from the back of the room: its ticks were 11 px and its strip titles 13 px; a long sentence's labels
    ran into each other."""
    from charts.kv_cache import KV_MIN_STRIP, KV_PLOT_PX, kv_cache_figure, kv_tick_plan
    from viz.theme import MIN_READABLE

    short = kv_cache_figure(
        3,
        positions=4,
        src_len=8,
        target_tokens=["<bos>", "▁Die", "▁Katze", "▁sa"],
        source_tokens=["▁The", "▁cat", "▁sat", "▁on", "▁the", "▁mat", ".", "<eos>"],
        title="Step 3",
    )
    long = kv_cache_figure(
        3,
        positions=30,
        src_len=40,
        target_tokens=[f"▁wort{i}" for i in range(30)],
        source_tokens=[f"▁word{i}xx" for i in range(40)],
        title="Step 29",
    )
    for fig in (short, long, kv_cache_figure(2, positions=0, src_len=4)):
        axes = [fig.layout[a] for a in fig.layout if a.startswith(("xaxis", "yaxis"))]
        sizes = [ax.tickfont.size or fig.layout.font.size for ax in axes]
        sizes += [a.font.size for a in fig.layout.annotations]
        sizes += [fig.layout.legend.font.size, fig.layout.hoverlabel.font.size, fig.layout.title.font.size]
        assert min(sizes) >= MIN_READABLE, sizes
        shares = [fig.layout[a].domain[1] - fig.layout[a].domain[0] for a in ("xaxis", "xaxis2")]
        assert min(shares) >= KV_MIN_STRIP * 0.9  # room for each strip's two-line title
    assert short.layout.xaxis.tickangle == 0 and list(short.layout.xaxis2.tickvals) == list(range(8))
    for axis, n in ((long.layout.xaxis, 30), (long.layout.xaxis2, 40)):
        kept = list(axis.tickvals)
        assert axis.tickangle == -90 and kept[-1] == n - 1  # upright, thinned, the newest position kept
        cell = KV_PLOT_PX * (axis.domain[1] - axis.domain[0]) / n
        assert min(b - a for a, b in zip(kept, kept[1:], strict=False)) * cell >= 1.3 * MIN_READABLE
    assert kv_tick_plan(["ab"] * 3, 300) == (0, 1) and kv_tick_plan(["▁abcdefg"] * 60, 300)[0] == -90
    with pytest.raises(ValueError):
        kv_tick_plan(["a"], 0)
