"""Figures built once per process and shared (ui/figures.py): equal arguments share one figure, any difference
builds another, and drawing a shared figure (also enlarged for presentation mode) never changes it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")

from ui import figures, presentation  # noqa: E402
from viz.attention import attention_heatmap  # noqa: E402


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
