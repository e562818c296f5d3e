"""charts/attribution.py: the methods × tokens grid, the heads' change grid and the source-share line, from arrays.

Every token must be labelled (a label left out cannot be read from a projector), every piece escaped, the shares
drawn on one scale, and a shape that does not fit the labels refused with a sentence.
"""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

from charts.attribution import attribution_html, attribution_svg, head_change_html, share_line_svg

METHODS = ["attention α", "‖α·f(x)‖", "gradient × input", "integrated gradients"]
SOURCE = ["▁My", "▁brother", "▁lives", "▁in", "▁Ber", "lin", ".", "<eos>"]
PREFIX = ["<bos>", "▁Mein", "▁Bruder"]


def shares(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).random((rows, cols))
    return x / x.sum(axis=1, keepdims=True)


def column_labels(fragment: str) -> list[str]:
    return [
        html.unescape(re.sub(r"<[^>]+>", "", m))
        for m in re.findall(r'<th class="ae-attr-col"[^>]*>(.*?)</th>', fragment)
    ]


@pytest.mark.parametrize("width", [390, 880, 120])
def test_every_token_is_labelled_once_and_every_cell_drawn(width):
    fragment = attribution_html(METHODS, SOURCE, shares(4, 8), PREFIX, shares(4, 3, 1), width=width)
    assert column_labels(fragment) == SOURCE + PREFIX
    assert fragment.count("data-v=") == 4 * (len(SOURCE) + len(PREFIX))
    for method in METHODS:
        assert html.escape(method) in fragment
    assert ">source</th>" in fragment and ">prefix</th>" in fragment
    assert fragment.count("box-shadow:inset 0 0 0 3px") == 4  # each row's strongest source piece


def test_a_long_sentence_keeps_every_label_over_more_tiers():
    source = [f"▁word{i}" for i in range(30)] + ["<eos>"]
    fragment = attribution_html(METHODS, source, shares(4, 31), PREFIX, shares(4, 3), width=390)
    assert column_labels(fragment) == source + PREFIX
    tiers = {int(t) for t in re.findall(r'data-tier="(\d)"', fragment)}
    assert len(tiers) > 1
    negative = np.ones((4, 34), bool)  # cells too narrow for a "−": the sign stays in the hover
    fragment = attribution_html(METHODS, source, shares(4, 31), PREFIX, shares(4, 3), negative, width=390)
    assert ">−</td>" not in fragment and fragment.count("(lowered p)") == 4 * 34 and "hover:" in fragment


def test_a_decoder_only_model_has_the_prefix_alone_and_negative_scores_are_marked():
    negative = np.zeros((4, 3), bool)
    negative[2, 1] = True
    fragment = attribution_html(METHODS, [], np.zeros((4, 0)), PREFIX, shares(4, 3), negative=negative, current=3)
    assert column_labels(fragment) == PREFIX and ">source</th>" not in fragment and ">prefix</th>" in fragment
    assert fragment.count(">−</td>") == 1 and "(lowered p)" in fragment
    assert "border-right:4px solid #e4572e" in fragment  # the method followed


def test_pieces_are_escaped_and_presentation_mode_is_larger():
    fragment = attribution_html(METHODS[:1], ["<script>", "a&b"], [[0.5, 0.5]], ["<bos>"], [[1.0]], large=True)
    assert "<script>" not in fragment and "&lt;script&gt;" in fragment and "a&amp;b" in fragment
    assert "font-size:16px" in fragment and "font-size:14px" not in fragment


def test_shapes_that_do_not_fit_the_labels_are_refused():
    with pytest.raises(ValueError, match="source"):
        attribution_html(METHODS, SOURCE, shares(4, 7), PREFIX, shares(4, 3))
    with pytest.raises(ValueError, match="layers, heads"):
        head_change_html(np.zeros(6))
    with pytest.raises(ValueError, match="shares for"):
        share_line_svg(["1 a", "2 b"], [0.5])


def test_the_heads_grid_labels_every_layer_and_head_and_outlines_the_largest():
    change = np.arange(24, dtype=float).reshape(6, 4)
    fragment = head_change_html(change, "Cross-attention heads")
    heads = [re.sub(r"<[^>]+>", "", m) for m in re.findall(r'<th class="ae-attr-col"[^>]*>(.*?)</th>', fragment)]
    assert heads == ["1", "2", "3", "4"]
    assert all(f"layer {i}</th>" in fragment for i in range(1, 7))
    assert 'data-v="1.0000"' in fragment and fragment.count("box-shadow:inset 0 0 0 3px") == 1
    assert head_change_html(np.zeros((2, 3))).count("box-shadow:inset") == 0  # nothing moved: nothing outlined


def test_the_line_labels_every_step_and_grows_wider_for_a_long_decoding():
    labels = [f"{i + 1} ▁tok{i}" for i in range(40)]
    svg = share_line_svg(labels, np.linspace(0, 1, 40), title="Source share", width=390)
    assert svg.count("<circle") == 40 and all(html.escape(label) in svg for label in labels)
    assert float(re.search(r'<svg[^>]* width="(\d+)"', svg).group(1)) > 390
    assert share_line_svg(["1 <b>"], [2.0]).count('data-share="1.0000"') == 1  # clipped to 0–1, escaped


def test_the_svg_to_save_labels_every_piece_and_draws_every_cell():
    negative = np.zeros((4, 11), bool)
    negative[3, 0] = True
    svg = attribution_svg(METHODS, SOURCE, shares(4, 8), PREFIX, shares(4, 3, 1), negative, title="Step 3 <b>")
    assert svg.startswith("<svg") and svg.endswith("</svg>") and "Step 3 &lt;b&gt;" in svg
    labels = [html.unescape(t) for t in re.findall(r'rotate\(-90\)"[^>]*>([^<]*)</text>', svg)]
    assert labels == SOURCE + PREFIX
    assert svg.count("data-v=") == 44 and svg.count('stroke-width="3"') == 4 and svg.count(">−</text>") == 1
    assert ">source</text>" in svg and ">prefix</text>" in svg
