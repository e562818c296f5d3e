"""The logit lens on the Translate page and in the Decoding lab (AppTest), on the shipped en-de and brown-lm and on
the tiny Hugging Face MarianMT and GPT-2 folders: the toggle and ``?lens=1``, a table a layer a row with the
numbers of :func:`reading.lens.logit_lens` on the model, the lab's heatmap of every step so far (its values against
the model, ≤ 1e-6), the ``.npz`` export, and a Next click that only indexes into the lens computed once.
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from test_attention_views import charts, z_of
from test_hf_pages import GPT2, MARIAN, assert_clean, next_step, open_app

from decoding.decoded import decode
from decoding.stepping import input_limit, prepare_source
from model.checkpoint import load_checkpoint
from reading.lens import logit_lens
from reading_views import lens as lens_view
from serving import heavy
from ui.checkpoints import ROOT
from ui.state import new_stepper

SHIPPED = [name for name in ("en-de", "brown-lm") if (ROOT / "checkpoints" / name / "model.safetensors").is_file()]
NAMES = SHIPPED + [MARIAN, GPT2]
TEXT = {
    "en-de": "My brother lives in Berlin.",
    "brown-lm": "She looked at him and",
    MARIAN: "The cat sat on the mat.",
    GPT2: "The cat sat on the mat.",
}


def folder(hf_root, name: str):
    return ROOT / "checkpoints" / name if name in SHIPPED else hf_root.path / name


def model_lens(hf_root, name: str):
    """The checkpoint and the lens of its greedy decoding of :data:`TEXT`, computed here, outside the app."""
    ckpt = load_checkpoint(folder(hf_root, name))
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, TEXT[name], input_limit(cfg), cfg.eos_id, cfg.unk_id).ids
    run = decode(new_stepper(ckpt.model, src, ckpt.generation))
    return ckpt, run, logit_lens(ckpt.model, src, run.prefix, run.generated)


def lens_tables(at) -> list[str]:
    return [m.value for m in at.markdown if 'class="ae-lens"' in m.value]


def row_probs(table: str) -> list[float]:
    return [float(p) for p in re.findall(r'<tr data-layer="\d+" data-p="([\d.]+)"', table)]


@pytest.mark.parametrize("name", NAMES)
def test_translate_shows_the_lens_of_each_step_and_a_click_only_indexes_it(monkeypatch, hf_root, name):
    ckpt, run, lens = model_lens(hf_root, name)
    at = open_app(monkeypatch, hf_root.path, name, text=TEXT[name], lens="1", step="1")
    assert_clean(at)
    assert at.toggle(key="tr_lens").value and at.query_params["lens"] == "1"
    (table,) = lens_tables(at)
    n_layers = ckpt.config.n_decoder_layers
    assert "Step 1: what each decoder layer would predict" in table and table.count("<tr data-layer=") == n_layers
    np.testing.assert_allclose(row_probs(table), lens.steps[0].chosen_probs, atol=5e-5)  # 4 decimals in the page
    captions = " ".join(c.value for c in at.caption)
    assert ("Pre-LN model" if ckpt.config.norm_first else "Post-LN model") in captions
    assert "the model's own distribution" in captions
    labels = [b.proto.label for b in at.get("download_button")]
    assert any(label.startswith("Download the lens") for label in labels) and "Download this step (.svg)" in labels

    computed = heavy.GATE.computed
    next_step(at)  # Next: the lens of step 2 from the one computed for the whole decoding
    (table,) = lens_tables(at)
    assert heavy.GATE.computed == computed
    if run.n_steps >= 2:
        assert "Step 2:" in table
        np.testing.assert_allclose(row_probs(table), lens.steps[1].chosen_probs, atol=5e-5)

    at.toggle(key="tr_lens").set_value(False).run()
    assert_clean(at)
    assert not lens_tables(at) and "lens" not in at.query_params


@pytest.mark.parametrize("name", NAMES)
def test_the_lab_tab_draws_every_step_so_far_with_the_models_numbers(monkeypatch, hf_root, name):
    ckpt, run, lens = model_lens(hf_root, name)
    steps = min(2, run.n_steps)
    at = open_app(monkeypatch, hf_root.path, name, "decoding", text=TEXT[name], lens="1", step=str(steps))
    assert_clean(at)
    assert "Logit lens" in [t.label for t in at.tabs]
    assert at.toggle(key="dl_lens").value
    (table,) = lens_tables(at)
    assert f"Step {steps}:" in table
    (spec,) = [c for c in charts(at) if "Every step so far" in c["layout"]["title"]["text"]]
    z = z_of(spec["data"][0])
    assert z.shape == (ckpt.config.n_decoder_layers, steps)
    expected = np.array([s.chosen_probs for s in lens.steps[:steps]]).T
    np.testing.assert_allclose(z, expected, atol=1e-6, rtol=0)
    np.testing.assert_allclose(z[-1], [r.prob for r in run.records[:steps]], atol=1e-6, rtol=0)  # the output


def test_a_bad_link_value_is_noted_and_the_lens_stays_off(monkeypatch, hf_root):
    at = open_app(monkeypatch, hf_root.path, MARIAN, lens="maybe", step="1")
    assert_clean(at)
    assert not at.toggle(key="tr_lens").value and not lens_tables(at)
    assert any("`lens` (logit lens)" in i.value for i in at.info)


def test_presentation_mode_draws_the_table_larger(monkeypatch, hf_root):
    at = open_app(monkeypatch, hf_root.path, GPT2, lens="1", step="1", present="1")
    assert_clean(at)
    (table,) = lens_tables(at)
    assert "font-size:16px" in table


def test_the_export_holds_every_step_of_the_lens(hf_root):
    ckpt, run, lens = model_lens(hf_root, MARIAN)
    data = np.load(io.BytesIO(lens_view.lens_npz(ckpt, lens)))
    n, layers = run.n_steps, ckpt.config.n_decoder_layers
    assert data["top_ids"].shape == data["top_probs"].shape == (n, layers, lens.k)
    assert data["chosen_probs"].shape == data["chosen_ranks"].shape == (n, layers)
    assert list(data["token_ids"]) == list(run.generated) and len(data["tokens"]) == n
    np.testing.assert_allclose(data["chosen_probs"][:, -1], [r.prob for r in run.records], atol=1e-6)
    assert not bool(data["final_norm"])  # Marian is post-LN
