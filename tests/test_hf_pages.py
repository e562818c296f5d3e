"""Hugging Face MarianMT and GPT-2 folders in the app: picked in the sidebar, every page works on them as on ours.

Tiny random folders are built offline (``tests/hf_fixtures.py``: a SentencePiece unigram and a byte-level BPE
tokenizer trained here, ``transformers`` models saved with ``save_pretrained``) and offered to the app through
``$ATTENTION_EXPLORER_CHECKPOINTS``. Streamlit's AppTest renders every page on both; the pieces must be shown in
the model's own convention (``▁`` for Marian, GPT-2's ``Ġ`` as ``␣``, never raw). Broken folders give a plain
``st.error``; ``load_checkpoint`` gives ``transformers``' logits; the trainer refuses to start from such a folder.
One browser test (Debian's Chromium) translates with the tiny Marian folder and opens the Attention page.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")  # a dev dependency: builds the folders, and the reference

from hf_fixtures import GPT2, MARIAN
from streamlit.testing.v1 import AppTest
from test_attention_views import charts, z_of

from app_pages.attention import views
from app_pages.decoding import lab
from decoding.stepping import Stepper, input_limit, prepare_source
from model.checkpoint import (
    CheckpointError,
    checkpoint_arch,
    is_checkpoint_dir,
    list_checkpoints,
    load_checkpoint,
)
from model.config import (
    ModelConfig,
    default_max_new_tokens,
)
from model.positional import sinusoidal_table
from tools.card_inputs import parameters as card_parameters
from ui import pieces
from ui.limits import DEMO_SWEEP_BUDGET
from ui.state import PRESETS

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["translate", "attention", "decoding", "positional", "tokenization", "lecture", "training"]
ATTENTION_TABS = ["Heads", "Tokens & lines", "Model grid", "Summaries", "Head statistics", "Ablation", "Compare"]
#: Each model's word-start mark as the pages show it, and GPT-2's stored mark, which must never reach a page.
MARK = {MARIAN: "▁", GPT2: "␣"}
RAW_GPT2_MARK = "Ġ"


def open_app(monkeypatch, root: Path, name: str, page: str | None = None, **query: str) -> AppTest:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(root))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["ckpt"] = name
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    if page:
        at.switch_page(f"app_pages/{page}/{page}.py").run()
    assert not at.exception, at.exception[0].message
    return at


def assert_clean(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def next_step(at, times: int = 1) -> None:
    for _ in range(times):
        buttons = [b for b in at.button if b.label == "Next" and not b.disabled]
        if buttons:
            buttons[0].click().run()
            assert_clean(at)


def shown_pieces(at) -> str:
    """Everything on the page that shows pieces: the token chips and grids (HTML markdown), the charts (their tick
    labels and hover texts), the tables and the pickers' options. Explanations (captions, plain markdown) are
    left out: they may name GPT-2's ``Ġ`` to explain it."""
    parts = [m.value for m in at.markdown if "<span" in m.value or "<table" in m.value or "<td" in m.value]
    parts += [json.dumps(c, ensure_ascii=False) for c in charts(at)]  # the spec writes "▁" as "\\u2581"
    parts += [df.value.to_string() for df in at.dataframe]
    parts += [" ".join(map(str, s.options)) for s in at.selectbox]
    return "\n".join(parts)


# --- the picker ------------------------------------------------------------------------------------------------
def test_the_folders_are_found_and_read_as_their_architecture(hf_root):
    found = {p.name for p in list_checkpoints(hf_root.path)}
    assert found == {MARIAN, GPT2}
    assert all(is_checkpoint_dir(hf_root.path / n) for n in found)
    assert checkpoint_arch(hf_root.path / MARIAN) == "encoder-decoder"
    assert checkpoint_arch(hf_root.path / GPT2) == "decoder-only"


def test_the_picker_shows_size_and_source_and_keeps_the_folder_name(monkeypatch, hf_root):
    at = open_app(monkeypatch, hf_root.path, MARIAN, "translate")
    assert_clean(at)
    box = at.sidebar.selectbox(key="app_ckpt")
    assert box.value == MARIAN and at.query_params["ckpt"] == MARIAN
    labels = {o for o in box.options if o.startswith(("opus", "gpt2"))}
    assert re.fullmatch(
        r"opus-mt-tiny · \d+ kB · Hugging Face tiny/opus-mt-en-de",
        next(iter(o for o in labels if o.startswith("opus"))),
    ), labels
    assert re.fullmatch(r"gpt2-tiny · \d+ kB · Hugging Face", next(o for o in labels if o.startswith("gpt2")))
    assert "en-de" in box.options  # ours keep their plain names
    summary = " ".join(c.value for c in at.sidebar.caption)
    assert "Hugging Face MarianMTModel" in summary and "trained by its authors" in summary
    assert "licence cc-by-4.0" in summary and "run by this project's Transformer code" in summary
    captions = " ".join(c.value for c in at.caption)
    assert "BLEU" not in captions and "opus-mt-en-de's weights (Hugging Face)" in captions  # no measured scores
    at.sidebar.selectbox(key="app_ckpt").select(GPT2).run()
    assert_clean(at)
    assert at.query_params["ckpt"] == GPT2
    assert at.text_input(key="tr_text").label.startswith("English prompt")  # the LM presets


def test_the_card_is_synthesised_from_the_folder(hf_root):
    card = load_checkpoint(hf_root.path / MARIAN).card
    assert card["source"] == "tiny/opus-mt-en-de" and card["model_type"] == "marian"
    assert card["origin"].startswith("Hugging Face MarianMTModel, trained by its authors")
    assert card["license"] == "cc-by-4.0" and "transformers library is not used" in card["computed_by"]
    assert card["file_bytes"] == (hf_root.path / MARIAN / "model.safetensors").stat().st_size
    gpt2 = load_checkpoint(hf_root.path / GPT2)
    assert gpt2.card["source"] == GPT2 and "license" not in gpt2.card  # it states none
    assert gpt2.card["parameters"] == gpt2.model.num_parameters()
    assert not gpt2.model.training and gpt2.tokenizer.kind == "byte-bpe"


# --- every page on both models ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [MARIAN, GPT2])
@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_a_hugging_face_model(monkeypatch, hf_root, name, page):
    at = open_app(monkeypatch, hf_root.path, name, page)
    assert_clean(at)
    next_step(at, 2)
    if page in ("translate", "attention", "decoding"):
        shown = shown_pieces(at)
        assert MARK[name] in shown, f"no {MARK[name]} piece on {page}"
        assert RAW_GPT2_MARK not in shown, f"a stored GPT-2 piece on {page}"
    if page == "translate":
        drawn = " ".join(m.value for m in at.markdown)
        assert ("Cross-attention of step 2" if name == MARIAN else "Masked self-attention of step 2") in drawn
    if page == "positional":
        check_positional(at, hf_root, name)
    if page == "tokenization":
        captions = " ".join(c.value for c in at.caption)
        assert ("SentencePiece unigram" if name == MARIAN else "byte-level byte-pair-encoding") in captions
        drawn = " ".join(m.value for m in at.markdown)
        assert ("best split (Viterbi)" in drawn) if name == MARIAN else ("start: the bytes" in drawn)
        assert RAW_GPT2_MARK not in shown_pieces(at)


def check_positional(at, hf_root, name: str) -> None:
    ckpt = load_checkpoint(hf_root.path / name)
    titles = {c["layout"]["title"]["text"]: c for c in charts(at) if "title" in c["layout"]}
    drawn = " ".join(m.value for m in at.markdown)
    assert f"max_len {ckpt.config.max_len}" in drawn
    if name == MARIAN:
        title = next(t for t in titles if "its fixed sinusoidal table (halves layout)" in t)
        expected = sinusoidal_table(64, 16, layout="halves").numpy()
        assert "first half" in drawn
    else:
        title = next(t for t in titles if "its learned table" in t)
        expected = ckpt.model.pos.table.detach().numpy()
    np.testing.assert_allclose(z_of(titles[title]["data"][0]), expected, atol=1e-6)
    assert ("embedding × √d_model" if name == MARIAN else "embedding (added unscaled)") in drawn


@pytest.mark.parametrize("name", [MARIAN, GPT2])
def test_every_attention_tab_and_the_sweep(monkeypatch, hf_root, name):
    at = open_app(monkeypatch, hf_root.path, name, "attention")
    for tab in ATTENTION_TABS:
        at.session_state["at_tab"] = tab
        at.run()
        assert_clean(at)
        if tab == "Tokens & lines":
            assert RAW_GPT2_MARK not in shown_pieces(at)
        if tab == "Ablation":
            sweep = at.button(key="at_sweep")
            assert sweep.label == "Sweep all heads" and not any("too slow" in i.value for i in at.info)
            sweep.click().run()
            assert_clean(at)
            assert len([c for c in charts(at) if "drop" in json.dumps(c)]) >= (3 if name == MARIAN else 1)
    at.toggle(key="at_words").set_value(True).run()  # word level: GPT-2's ␣ opens a word as ▁ does
    assert_clean(at)
    labels = " ".join(charts(at)[0]["layout"]["yaxis"].get("ticktext", [])) if charts(at) else ""
    assert RAW_GPT2_MARK not in labels


def test_a_big_model_sweeps_one_layer_and_says_so(monkeypatch, hf_root):
    """A 74M-parameter 6+6-layer MarianMT must stay usable on two cores: the sweep covers the layer shown."""
    plan = views.sweep_plan({"encoder": 6, "decoder": 6, "cross": 6}, 8, 74_000_000, 40, "cross", 5)
    assert plan.scope == "layer" and plan.layers == {"cross": (5,)} and plan.scorings == 8
    assert "144 heads" in plan.note and "too slow" in plan.note and "layer 6" in plan.note
    demo = views.sweep_plan({"self": 12}, 12, 124_000_000, 200, "self", 0, DEMO_SWEEP_BUDGET)
    assert demo.scope == "none" and not demo.layers and "shorter" in demo.note
    # The shipped translator sweeps every head of a ten-word sentence; in the hosted demo, whose visitors share the
    # CPU, the heads of the kind shown, and it says so.
    n_parameters, _ = card_parameters(ROOT / "checkpoints" / "en-de")
    cfg = ModelConfig.from_json(ROOT / "checkpoints" / "en-de" / "config.json")
    # (a ten-word sentence is ~26 positions with its 16k vocabulary: 12 source pieces with <eos>, 14 target ones)
    shipped = views.sweep_plan(cfg.attention_layers(), cfg.n_heads, n_parameters, 26, "cross", 0)
    assert shipped.scope == "all" and shipped.note is None
    demo = views.sweep_plan(cfg.attention_layers(), cfg.n_heads, n_parameters, 26, "cross", 0, DEMO_SWEEP_BUDGET)
    assert demo.scope == "kind" and f"the {cfg.n_heads * cfg.n_decoder_layers} heads of the kind shown" in demo.note
    # The page with a budget the tiny model's full sweep exceeds: it says so, and sweeps the layer shown.
    ckpt = load_checkpoint(hf_root.path / MARIAN)
    src = prepare_source(ckpt.tokenizer, PRESETS[0], input_limit(ckpt.config), ckpt.config.eos_id, ckpt.config.unk_id)
    stepper = Stepper(ckpt.model, src.ids, max_new_tokens=default_max_new_tokens(ckpt.config, len(src.ids)))
    stepper.run_to_end()
    per_scoring = ckpt.model.num_parameters() * (len(src.ids) + len(stepper.tokens))  # as the page counts
    monkeypatch.setattr("ui.limits.SWEEP_BUDGET", per_scoring * 6.5)  # one layer (4 heads + 1), not one kind (8 + 1)
    at = open_app(monkeypatch, hf_root.path, MARIAN, "attention", tab="Ablation", kind="decoder", layer="2")
    assert_clean(at)
    assert any("too slow here" in i.value for i in at.info)
    sweep = at.button(key="at_sweep")
    assert sweep.label == "Sweep this layer's heads"
    sweep.click().run()
    assert_clean(at)
    drops = [z_of(c["data"][0]) for c in charts(at) if "drop" in json.dumps(c)]
    assert len(drops) == 1 and drops[0].shape == (2, 4)
    assert np.isnan(drops[0][0]).all() and np.isfinite(drops[0][1]).all()  # layer 2 swept, layer 1 not


def test_the_decoding_lab_samples_beams_and_forces_a_shown_piece(monkeypatch, hf_root):
    at = open_app(monkeypatch, hf_root.path, GPT2, "decoding")
    next_step(at)
    assert "␣" in at.text_input(key="dl_force_text").help or "␣" in at.text_input(key="dl_force_text").placeholder
    tok = load_checkpoint(hf_root.path / GPT2).tokenizer
    piece = next(p for p in map(tok.id_to_token, range(tok.vocab_size)) if p.startswith("Ġ") and len(p) > 2)
    at.text_input(key="dl_force_text").set_value(tok.display(piece))  # typed as the pages show it
    [b for b in at.button if b.label == "Force this token"][0].click().run()
    assert_clean(at)
    assert at.session_state["dl_forced"] == {1: tok.token_to_id(piece)}
    at.radio(key="dl_w_strategy").set_value("sample").run()
    next_step(at)
    at.radio(key="dl_w_strategy").set_value("beam").run()
    next_step(at, 2)
    assert RAW_GPT2_MARK not in shown_pieces(at)
    at.radio(key="dl_w_strategy").set_value("greedy").run()
    next_step(at)
    tabs = at.tabs
    assert any(t.label == "KV cache" for t in tabs)


def test_pieces_are_shown_through_the_tokenizer(hf_root):
    gpt2 = load_checkpoint(hf_root.path / GPT2).tokenizer
    marian = load_checkpoint(hf_root.path / MARIAN).tokenizer
    enc = gpt2.encode("The cat sat on the mat.")
    shown = pieces.shown(gpt2, enc.tokens)
    assert "␣" + "".join(shown).split("␣", 1)[1] and all(RAW_GPT2_MARK not in p for p in shown)
    assert [gpt2.from_display(p) for p in shown] == enc.tokens
    assert pieces.of_ids(marian, marian.encode("The cat").ids) == marian.encode("The cat").tokens  # as stored
    assert pieces.word_start(gpt2) == "␣" and pieces.word_start(marian) == "▁"
    assert "Ġ" in pieces.word_note(gpt2) and "▁" in pieces.word_note(marian)
    piece = next(p for p in shown if p.startswith("␣"))
    assert lab.resolve_piece(gpt2, piece) == gpt2.token_to_id(gpt2.from_display(piece))
    assert lab.resolve_piece(gpt2, piece[1:]) is not None  # typed without its mark: read as a word start too
    assert lab.example_piece(gpt2, enc.ids).startswith(("␣", "T"))
    assert views.word_labels(["The", "␣M", "ü", "ller", "."]) == ["The", "␣Müller."]


# --- broken folders ----------------------------------------------------------------------------------------------
def _broken(root: Path, source: Path, name: str, breaker) -> None:
    shutil.copytree(source, root / name)
    breaker(root / name)


def _truncate(folder: Path) -> None:
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _other_type(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))


@pytest.mark.parametrize(
    "name, breaker, says",
    [
        ("truncated", _truncate, "corrupt or unreadable"),
        ("no-source-spm", lambda f: (f / "source.spm").unlink(), "source.spm is missing"),
        ("bert", _other_type, "model_type 'bert' is not supported"),
    ],
)
def test_a_broken_folder_gives_a_clear_error_not_a_traceback(monkeypatch, hf_root, tmp_path, name, breaker, says):
    _broken(tmp_path, hf_root.path / MARIAN, name, breaker)
    with pytest.raises(CheckpointError, match=re.escape(says)):
        load_checkpoint(tmp_path / name)
    at = open_app(monkeypatch, tmp_path, name, "attention")
    assert not at.exception
    assert at.sidebar.selectbox(key="app_ckpt").value == name
    assert len(at.error) == 1 and "cannot be loaded" in at.error[0].value and says in at.error[0].value


# --- the numbers -------------------------------------------------------------------------------------------------
def test_load_checkpoint_gives_the_logits_of_transformers(hf_root):
    marian = load_checkpoint(hf_root.path / MARIAN)
    tok, cfg = marian.tokenizer, marian.config
    src = torch.tensor([tok.encode("The cat sat on the mat.").ids + [cfg.eos_id]])
    tgt = torch.tensor([[cfg.bos_id] + tok.encode("Die Katze").ids])
    with torch.no_grad():
        ref = hf_root.reference[MARIAN](input_ids=src, attention_mask=torch.ones_like(src), decoder_input_ids=tgt)
        torch.testing.assert_close(marian.model(src, tgt), ref.logits, atol=1e-5, rtol=0)
    gpt2 = load_checkpoint(hf_root.path / GPT2)
    ids = torch.tensor([[gpt2.config.bos_id] + gpt2.tokenizer.encode("The weather is nice").ids])
    with torch.no_grad():
        torch.testing.assert_close(
            gpt2.model(None, ids), hf_root.reference[GPT2](input_ids=ids).logits, atol=1e-5, rtol=0
        )


# --- training: never from a Hugging Face folder ----------------------------------------------------------------
def test_the_trainer_refuses_a_hugging_face_folder(monkeypatch, hf_root, tmp_path):
    from argparse import Namespace

    from corpora.files import DataError
    from launching import form
    from tools.average import average_checkpoints
    from training.checkpoints import hf_refusal, warm_start

    folder = hf_root.path / MARIAN
    assert "Hugging Face model folder" in hf_refusal(folder)
    assert hf_refusal(ROOT / "checkpoints" / "en-de") is None
    assert any("Hugging Face model folder" in e for e in form.validate_form({"init_from": str(folder)}))
    with pytest.raises(DataError, match="Hugging Face model folder"):
        warm_start(Namespace(init_from=str(folder)), "cpu")
    with pytest.raises(CheckpointError, match="Hugging Face model folder"):
        average_checkpoints([folder], tmp_path / "mean")
    (tmp_path / "checkpoints").mkdir()
    shutil.copytree(folder, tmp_path / "checkpoints" / MARIAN)
    monkeypatch.setattr(form, "REPO", tmp_path)
    assert not any(MARIAN in c for c in form.warm_start_choices())  # listed for the pages, never as a start


# --- in the browser ------------------------------------------------------------------------------------------------
# In the group of the browser tests that look at pages (browser_helpers.py): its steps wait for each other, and the
# app with the tiny folders (conftest's hf_server) is already served there for the lens and query-key tests.
@pytest.mark.xdist_group("browser-views")
def test_in_the_browser_translate_with_marian_then_the_attention_page(hf_server, new_page):
    """The app served with the tiny Marian folder: translate two steps, then the Attention page; screenshots
    ``test-artifacts/hf-marian-translate.png`` and ``hf-marian-attention.png``."""
    from browser_helpers import ARTIFACTS, expect

    page = new_page((1600, 1000))
    page.goto(f"{hf_server}/?ckpt={MARIAN}")
    page.get_by_text(re.compile(r"Step 0 of \d+")).wait_for()
    # The sidebar's checkpoint box can draw after the step line; expect() retries until it shows the label.
    box = page.locator('[data-testid="stSidebar"]').get_by_role("combobox", name="Checkpoint")
    expect(box).to_match_aria_snapshot(
        r'- combobox "Checkpoint": /opus-mt-tiny · \d+ kB · Hugging Face/', timeout=30_000
    )
    for step in (1, 2):
        page.get_by_role("button", name="Next").click()
        page.get_by_text(re.compile(rf"Step {step} of \d+")).wait_for()
    page.locator(".ae-align").filter(has_text="Alignment so far").wait_for()
    body = page.inner_text("body")
    assert "Traceback" not in body and "▁" in body
    page.wait_for_timeout(500)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "hf-marian-translate.png"))
    page.locator('[data-testid="stSidebarNav"] a', has_text="Attention").click()
    page.get_by_text("Hover a cell for the pair").wait_for()
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for()
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidgetRunningIcon\"]')")
    page.wait_for_timeout(1500)  # Plotly draws in the next frames
    assert page.locator('[data-testid="stException"]').count() == 0
    assert "Traceback" not in page.inner_text("body")
    page.screenshot(path=str(ARTIFACTS / "hf-marian-attention.png"))
