"""Figures built once per process and shared (serving/figures.py): equal arguments share one figure, any difference
builds another, and drawing a shared figure (also enlarged for presentation mode) never changes it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")

from serving import figures
from ui import presentation
from viz.attention import attention_heatmap


def test_equal_arguments_share_one_figure_and_any_difference_builds_another():
    w = np.random.default_rng(0).random((4, 5)).astype(np.float32)
    labels_q, labels_k = [f"q{i}" for i in range(4)], [f"k{i}" for i in range(5)]
    before = figures.built
    a = figures.shared(attention_heatmap, w, labels_q, labels_k, title="one")
    b = figures.shared(attention_heatmap, w.copy(), list(labels_q), list(labels_k), title="one")  # equal values
    c = figures.shared(attention_heatmap, torch.from_numpy(w), labels_q, labels_k, title="one")  # a tensor alike
    assert a is b is c and figures.built == before + 1
    assert figures.shared(attention_heatmap, w + 1e-3, labels_q, labels_k, title="one") is not a
    assert figures.shared(attention_heatmap, w, labels_q, labels_k, title="two") is not a
    assert figures.shared(attention_heatmap, w, labels_q[::-1], labels_k, title="one") is not a


def test_a_value_with_no_content_key_is_refused():
    with pytest.raises(TypeError, match="no content key"):
        figures.value_key(object())
    assert figures.value_key({"b": [1, 2.0], "a": np.float32(0.5)}) == figures.value_key({"a": 0.5, "b": (1, 2.0)})


def test_enlarging_a_shared_figure_for_presentation_mode_leaves_it_as_it_was():
    w = np.eye(3, dtype=np.float32)
    fig = figures.shared(attention_heatmap, w, ["a", "b", "c"], ["a", "b", "c"], title="shared")
    before = fig.to_json()
    big = presentation.enlarged(fig)
    assert big is not fig and big.to_json() != before and fig.to_json() == before


@pytest.mark.parametrize("name", ["heatmap", "causal heatmap", "grid", "token bars", "lines"])
def test_a_figure_built_without_validation_sends_what_the_validated_one_sends(name, monkeypatch):
    """The served app builds figures without Plotly's validation (viz.theme.figure, for speed), the tests with it:
    the JSON Streamlit sends to the browser is the same either way, so the tests see what visitors get."""
    import json

    import plotly.io as pio

    from viz.attention_views import lines_figure, token_bar_figure
    from viz.grid import model_grid_figure
    from viz.theme import VALIDATE_ENV

    w = np.random.default_rng(1).random((6, 5)).astype(np.float32)
    q, k = [f"▁q{i}" for i in range(6)], [f"▁k{i}" for i in range(5)]
    build = {
        "heatmap": lambda: attention_heatmap(w, q, k, title="a title"),
        "causal heatmap": lambda: attention_heatmap(np.tril(np.ones((5, 5), np.float32)), k, k, causal=True),
        "grid": lambda: model_grid_figure(np.stack([np.stack([w, w])] * 2), q, k, title="g", highlight=(0, 1)),
        "token bars": lambda: token_bar_figure(w[0], k, title="bars", mark=1),
        "lines": lambda: lines_figure(w, q, k, title="lines"),
    }[name]
    sent = {}
    for check in ("", "1"):
        monkeypatch.setenv(VALIDATE_ENV, check)
        sent[check] = json.loads(pio.to_json(build().to_dict(), validate=False))
    assert sent[""] == sent["1"]
