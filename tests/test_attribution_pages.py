"""Attention vs attribution on the Translate page and in the Decoding lab (AppTest): ``?attr=1`` at step 3 of the
shipped translator (the grid, the source share, the completeness gap and the faithfulness numbers, the same as
``reading/`` gives outside the app), a layer switch that recomputes no attribution, bad link values, the shipped
language model and the tiny Hugging Face folders (no source: the prefix alone), and a what-if replacement.
"""

from __future__ import annotations

import html
import io
import re
import time

import numpy as np
import pandas as pd
import pytest
from test_hf_pages import GPT2, MARIAN, assert_clean, next_step, open_app

from charts import attribution as charts_attribution
from decoding.decoded import decode
from decoding.stepping import input_limit, prepare_source
from model.checkpoint import load_checkpoint
from reading.attribution import attribute_step
from reading.faithfulness import faithfulness
from reading_views import attribution as attribution_view
from reading_views import step_attribution
from reading_views.attribution_scores import attribution_npz
from serving import figures, heavy, memory, prefetch
from ui.checkpoints import ROOT, checkpoint_version
from ui.state import new_stepper

EN_DE = ROOT / "checkpoints" / "en-de" / "model.safetensors"
BROWN = ROOT / "checkpoints" / "brown-lm" / "model.safetensors"
SENTENCE = "My brother lives in Berlin."
needs_en_de = pytest.mark.skipif(not EN_DE.is_file(), reason="the shipped en-de checkpoint is not here")


def grids(at, kind: str = "attr") -> list[str]:
    return [m.value for m in at.markdown if f'class="ae-{kind}"' in m.value]


def text_of(at) -> str:
    return " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)


def faithful_table(at) -> pd.DataFrame:
    """The faithfulness table the page drew (an HTML table, built once per step for the room), read back: its
    header and its cells' text, the numbers as floats."""
    (table,) = [m.value for m in at.markdown if "<table" in m.value and "comprehensiveness ↑" in m.value]
    rows = [
        [html.unescape(cell) for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", table)
    ]
    frame = pd.DataFrame(rows[1:], columns=rows[0]).set_index("method")
    return frame.astype({"comprehensiveness ↑": float, "sufficiency ↓": float})


@needs_en_de
def test_translate_at_step_3_shows_every_method_and_the_models_faithfulness(monkeypatch, tmp_path):
    at = open_app(monkeypatch, tmp_path, "en-de", text=SENTENCE, step="3", attr="1")
    assert_clean(at)
    assert at.toggle(key="tr_attr").value and at.query_params["attr"] == "1"
    (grid,) = grids(at)
    assert "Step 3: what “▁lebt” owes each piece" in grid
    for piece in ("▁My", "▁brother", "▁lives", "&lt;eos&gt;", "&lt;bos&gt;", "▁Mein", "▁Bruder"):
        assert piece in grid
    text = text_of(at)
    assert "Source vs prefix:" in text and "completeness gap" in text and "ERASER" in text
    assert "docs/attribution.md" in text

    ckpt = load_checkpoint(ROOT / "checkpoints" / "en-de")
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, SENTENCE, input_limit(cfg), cfg.eos_id, cfg.unk_id).ids
    run = decode(new_stepper(ckpt.model, src, ckpt.generation))
    reading = attribute_step(ckpt.model, src, run.tokens[:3], run.generated[2])
    assert grid.count("data-v=") == 4 * (len(src) + 3)  # 4 methods × (source pieces + <bos> Mein Bruder)
    faith = faithfulness(ckpt.model, reading.step, reading.all_scores())
    table = faithful_table(at)
    assert list(table.index) == [*attribution_view.NAMES.values(), "random"]
    for method, name in attribution_view.NAMES.items():
        # written with three decimals
        assert table.loc[name, "comprehensiveness ↑"] == pytest.approx(
            faith.aopc("comprehensiveness", method), abs=5e-4
        )
        assert table.loc[name, "sufficiency ↓"] == pytest.approx(faith.aopc("sufficiency", method), abs=5e-4)
    assert f"{reading.source_share:.0%} of this prediction comes from the English" in text
    labels = [b.proto.label for b in at.get("download_button")]
    assert "Download the scores (.npz)" in labels

    computed = heavy.GATE.computed  # another layer and head: the attribution is reused, the ranking measured again
    at.selectbox(key="tr_attr_layer").set_value(5).run()
    at.selectbox(key="tr_attr_head").set_value(0).run()
    assert_clean(at)
    assert heavy.GATE.computed - computed == 2  # the faithfulness of each ranking, no attribution
    assert at.query_params["attr_layer"] == "6" and at.query_params["attr_head"] == "1"
    assert "layer 6, head 1" in text_of(at)

    at.toggle(key="tr_attr").set_value(False).run()  # closed: the view and its parameters leave the page and link
    assert_clean(at)
    assert not grids(at) and "attr" not in at.query_params and "attr_layer" not in at.query_params


@needs_en_de
def test_the_next_steps_are_prefetched_and_a_next_finds_them_ready(monkeypatch, tmp_path, request):
    worker = prefetch.Prefetcher(cap=prefetch.CAP)  # the tests' own is off (conftest)
    monkeypatch.setattr(prefetch, "PREFETCH", worker)
    request.addfinalizer(worker.close)  # the Next below asks for more: torch must not compute as the process exits
    at = open_app(monkeypatch, tmp_path, "en-de", text=SENTENCE, step="3", attr="1")
    assert_clean(at)
    deadline = time.monotonic() + 300  # two steps' attribution in the background, on a busy machine
    while not prefetch.PREFETCH.idle():
        assert time.monotonic() < deadline, "the prefetch never finished"
        time.sleep(0.05)
    ckpt = load_checkpoint(ROOT / "checkpoints" / "en-de")
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, SENTENCE, input_limit(cfg), cfg.eos_id, cfg.unk_id).ids
    run = decode(new_stepper(ckpt.model, src, ckpt.generation))
    version, n_steps = checkpoint_version(ckpt), attribution_view.STEP_CHOICES[0]
    for t in (4, 5):  # AHEAD steps after the one shown, each with the faithfulness the view draws
        inputs = step_attribution.step_inputs(ckpt, src, run, t)
        assert heavy.GATE.cached(step_attribution.attribution_key(version, inputs, n_steps))
        assert heavy.GATE.cached(step_attribution.faithfulness_key(version, inputs, n_steps, None, None))
    assert not heavy.GATE.cached(
        step_attribution.attribution_key(version, step_attribution.step_inputs(ckpt, src, run, 6), n_steps)
    )
    computed = heavy.GATE.computed
    next_step(at)
    assert "Step 4: what" in grids(at)[0]
    assert heavy.GATE.computed == computed  # Next found its step's attribution and faithfulness ready
    # steps 4 and 5 are read: a click on step 3 asks the prefetcher for nothing more
    assert not step_attribution.prefetch_after(ckpt, src, run, 3, n_steps, None, None)


@needs_en_de
def test_a_step_seen_again_draws_its_grid_and_table_from_the_room_s_cache(monkeypatch, tmp_path):
    """The grid and the faithfulness table are built once per step, method, layer and head for every visitor
    (serving.figures): a second visitor on the same step builds neither again and gets the same HTML. What is
    shared is a string (nothing a session could change) whose bytes the byte-bounded cache counts."""
    first = open_app(monkeypatch, tmp_path, "en-de", text=SENTENCE, step="3", attr="1")
    assert_clean(first)
    built = figures.built
    second = open_app(monkeypatch, tmp_path, "en-de", text=SENTENCE, step="3", attr="1")
    assert_clean(second)
    assert figures.built == built
    assert grids(second) == grids(first) and faithful_table(second).equals(faithful_table(first))
    cache = figures._figures
    for build in (charts_attribution.attribution_html, attribution_view.faithfulness_html):
        keys = [k for k in cache if k[:2] == (build.__module__, build.__qualname__)]
        assert keys, f"no {build.__qualname__} in the shared cache"
        for key in keys:
            value = cache.get(key)
            assert isinstance(value, str) and cache.size_of(key) == memory.nbytes(value) >= len(value)


@needs_en_de
def test_the_export_holds_the_scores_of_every_method(monkeypatch):
    ckpt = load_checkpoint(ROOT / "checkpoints" / "en-de")
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, SENTENCE, input_limit(cfg), cfg.eos_id, cfg.unk_id).ids
    reading = attribute_step(ckpt.model, src, [cfg.bos_id], ckpt.tokenizer.encode("Mein").ids[0], n_steps=8)
    faith = faithfulness(ckpt.model, reading.step, reading.all_scores())
    data = np.load(io.BytesIO(attribution_npz(ckpt, reading, faith, None, None)))
    assert data["source_scores"].shape == data["source_shares"].shape == (4, len(src))
    assert data["prefix_scores"].shape == (4, 1) and len(data["source_tokens"]) == len(src)
    assert data["attention_source"].shape == (cfg.n_decoder_layers, cfg.n_heads, len(src))
    assert data["comprehensiveness"].shape == (5, 3) and str(data["faithfulness_methods"][-1]) == "random"
    np.testing.assert_allclose(data["source_shares"].sum(axis=1), 1.0)
    assert float(data["completeness_gap"]) == pytest.approx(reading.gradients.completeness_gap)


@needs_en_de
def test_bad_link_values_are_noted_and_ignored(monkeypatch, tmp_path):
    at = open_app(monkeypatch, tmp_path, "en-de", text=SENTENCE, step="3", attr="maybe")
    assert_clean(at)
    assert not at.toggle(key="tr_attr").value and not grids(at)
    assert any("`attr` (attention vs attribution)" in i.value for i in at.info)

    at = open_app(
        monkeypatch,
        tmp_path,
        "en-de",
        text=SENTENCE,
        step="3",
        attr="1",
        attr_layer="99",
        attr_method="saliency",
        attr_steps="7",
    )
    assert_clean(at)
    notes = " ".join(i.value for i in at.info)
    assert "`attr_layer` (layer)" in notes and "`attr_method` (method)" in notes and "`attr_steps`" in notes
    assert at.selectbox(key="tr_attr_layer").value == "mean" and grids(at)
    assert at.selectbox(key="tr_attr_method").value == "integrated_gradients"


@pytest.mark.skipif(not BROWN.is_file(), reason="the shipped brown-lm checkpoint is not here")
def test_the_language_model_has_its_prefix_alone(monkeypatch, tmp_path):
    at = open_app(monkeypatch, tmp_path, "brown-lm", text="She looked at him and", step="3", attr="1")
    assert_clean(at)
    (grid,) = grids(at)
    assert ">source</th>" not in grid and ">prefix</th>" in grid and "▁looked" in grid
    assert "No source:" in text_of(at) and faithful_table(at).shape[0] == 5
    assert not [b for b in at.button if b.label == "Source share at every step so far"]
    at.toggle(key="tr_attr_whatif").set_value(True).run()  # the what-if changes a word of the prompt
    at.selectbox(key="tr_attr_word").set_value(3).run()
    at.text_input(key="tr_attr_with").input("her").run()
    assert_clean(at)
    assert "“him” replaced by “her”" in text_of(at)
    (heads,) = grids(at, "heads")  # self-attention only: no cross-attention to move
    assert "Self-attention heads" in heads and heads.count("data-v=") == 4 * 4


@pytest.mark.parametrize("name", [MARIAN, GPT2])
def test_the_hugging_face_folders(monkeypatch, hf_root, name):
    at = open_app(monkeypatch, hf_root.path, name, text="The cat sat on the mat.", step="1", attr="1")
    assert_clean(at)
    (grid,) = grids(at)
    assert (">source</th>" in grid) == (name == MARIAN)
    assert "completeness gap" in text_of(at)


@needs_en_de
def test_what_if_a_word_is_replaced_or_masked(monkeypatch, tmp_path):
    at = open_app(monkeypatch, tmp_path, "en-de", text=SENTENCE, step="3", attr="1")
    at.toggle(key="tr_attr_whatif").set_value(True).run()
    assert_clean(at)
    word = at.selectbox(key="tr_attr_word")
    # integrated gradients' strongest word at "lebt" is chosen first ("brother" for the 16k model, "lives" before it)
    chosen = word.options[word.index].split(" · ", 1)[1]
    assert chosen in SENTENCE.split() and f"“{chosen}” masked" in text_of(at)
    assert len(grids(at, "heads")) == 2  # cross- and self-attention heads
    at.selectbox(key="tr_attr_word").select_index(SENTENCE.split().index("lives")).run()
    at.text_input(key="tr_attr_with").input("works").run()
    assert_clean(at)
    text = text_of(at)
    assert "“lives” replaced by “works”" in text
    match = re.search(r"p\(“▁lebt”\) (\d+\.\d+) → (\d+\.\d+)", text)
    assert match and float(match.group(1)) > float(match.group(2))
    (table,) = [t.value for t in at.table if "what if" in t.value.columns]
    assert len(table) == 10 and table["as it is"].iloc[0] == "▁lebt"
    (cross, _self) = grids(at, "heads")
    assert cross.count("data-v=") == 36 and cross.count("box-shadow:inset 0 0 0 3px") == 1


@needs_en_de
def test_the_what_if_is_in_the_link_and_comes_back_from_it(monkeypatch, tmp_path):
    at = open_app(monkeypatch, tmp_path, "en-de", text=SENTENCE, step="3", attr="1")
    at.toggle(key="tr_attr_whatif").set_value(True).run()
    at.selectbox(key="tr_attr_word").set_value(0).run()
    at.text_input(key="tr_attr_with").input("Your").run()
    assert_clean(at)
    link = {k: at.query_params[k] for k in ("whatif", "whatif_word", "whatif_with")}
    assert link == {"whatif": "1", "whatif_word": "1", "whatif_with": "Your"}

    again = open_app(monkeypatch, tmp_path, "en-de", text=SENTENCE, step="3", attr="1", **link)
    assert_clean(again)
    assert again.toggle(key="tr_attr_whatif").value and again.selectbox(key="tr_attr_word").value == 0
    assert again.text_input(key="tr_attr_with").value == "Your" and "“My” replaced by “Your”" in text_of(again)

    bad = open_app(monkeypatch, tmp_path, "en-de", text=SENTENCE, step="3", attr="1", whatif="1", whatif_word="99")
    assert_clean(bad)
    assert bad.selectbox(key="tr_attr_word").value == 4  # clamped to the last of the five words, with a note
    assert any("whatif_word" in i.value for i in bad.info)

    again.toggle(key="tr_attr").set_value(False).run()
    assert not {"whatif", "whatif_word", "whatif_with"} & set(again.query_params)


@needs_en_de
def test_the_lab_tab_reads_its_own_decoding(monkeypatch, tmp_path):
    at = open_app(monkeypatch, tmp_path, "en-de", "decoding", text=SENTENCE, step="2", attr="1")
    assert_clean(at)
    assert attribution_view.LABEL in [t.label for t in at.tabs]
    assert at.toggle(key="dl_attr").value
    (grid,) = grids(at)
    assert "Step 2:" in grid and faithful_table(at).shape[0] == 5
    at.button(key="dl_attr_line_button").click().run()
    assert_clean(at)
    assert any('class="ae-share-line"' in m.value and m.value.count("<circle") == 2 for m in at.markdown)
