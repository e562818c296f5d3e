"""What a Hugging Face folder says about decoding (``generation_config.json``) and where the app uses it.

With the generation config applied, our greedy decoding (the Translate page's, :func:`ui.state.greedy_run`) and our
beam search (the Decoding lab's defaults) give what ``transformers``' ``generate`` gives on tiny random models
(``tests/hf_fixtures.py``): the same tokens, stopped at the same length. The beam comparison uses a length penalty
of 0, the one value at which ``generate``'s ``length ** penalty`` and the lab's GNMT ``((5 + length) / 6) ** α``
agree.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")  # a dev dependency: builds the folders, and the reference

from hf_fixtures import write_tiny_gpt2_model, write_tiny_marian_model, write_tiny_marian_tokenizer
from test_hf_equivalence import PROMPTS, SOURCES, _padded, _until, _varied_stop_token
from test_hf_pages import assert_clean, open_app

from app_pages.decoding import lab
from decoding.beam import beam_search
from decoding.stepping import Stepper, input_limit, prepare_source
from model.checkpoint import CheckpointError, load_checkpoint
from model.config import default_max_new_tokens
from model.hf.generation import GenerationDefaults, decoding_cap
from model.hf.loader import load_hf_model, read_generation
from serving import heavy
from ui import state

#: What an opus-mt download's generation_config.json says (its ids those of the tiny model), with a small cap so
#: that the cap binds, and the length penalty and stopping rule at which generate's beam search is ours.
MARIAN_GENERATION = {
    "bad_words_ids": [[96]],
    "decoder_start_token_id": 96,
    "eos_token_id": 0,
    "forced_eos_token_id": 0,
    "max_length": 8,
    "num_beams": 3,
    "length_penalty": 0.0,
    "early_stopping": True,
    "pad_token_id": 96,
    "renormalize_logits": True,
}


def _write_generation(folder: Path, **keys) -> None:
    (folder / "generation_config.json").write_text(json.dumps(keys), encoding="utf-8")


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = tmp_path_factory.mktemp("opus-mt-gen")
    reference = write_tiny_marian_model(folder)
    _write_generation(folder, **MARIAN_GENERATION)
    model, cfg, info = load_hf_model(folder)
    return folder, reference, model, info["generation"]


def _generate(reference, folder: Path, src: list[list[int]], force_eos: bool = False, **changes) -> list[list[int]]:
    """``generate`` with the folder's generation config as ``transformers`` reads it (``changes`` on top), with its
    forced ``</s>`` at the cap only when ``force_eos`` (our greedy decodings force it, our beam search stops at the
    cap instead: ``model/hf/generation.py``; switched off as an argument: a generation config's ``None`` is replaced
    by the model's own value). The generated ids per row."""
    ids, mask = _padded(src, 96)
    config = transformers.GenerationConfig.from_pretrained(folder)
    config.update(**changes)
    forced = {} if force_eos else {"forced_eos_token_id": None}
    out = reference.generate(input_ids=ids, attention_mask=mask, generation_config=config, **forced)
    return [row[1:] for row in out.tolist()]


# --- the generation config read ---------------------------------------------------------------------------------
def test_the_generation_config_is_read(marian):
    folder, _, model, generation = marian
    assert generation == GenerationDefaults(
        "generation_config.json",
        max_length=8,
        num_beams=3,
        length_penalty=0.0,
        bad_words_ids=(96,),
        forced_eos_token_id=0,
    )
    assert generation.length_cap(1) == 7 and generation.length_cap(20) == 1  # generate adds one token at least
    assert GenerationDefaults(max_length=8, max_new_tokens=3).length_cap(1) == 3  # max_new_tokens wins
    assert GenerationDefaults().length_cap(1) is None and GenerationDefaults().beam_defaults() == {}
    assert generation.beam_defaults() == {"beam": 3, "alpha": 0.0}
    assert model.cfg.suppress_ids == [96]


def test_without_generation_config_json_the_keys_of_config_json_are_read(marian, tmp_path):
    config = json.loads((marian[0] / "config.json").read_text())  # the fixture writes num_beams 4, max_length 64
    generation = read_generation(tmp_path, config)
    assert (generation.source, generation.num_beams, generation.max_length) == ("config.json", 4, 64)
    assert read_generation(tmp_path, {}) == GenerationDefaults("config.json")


def test_bad_words_of_the_generation_config_are_never_generated(marian, tmp_path):
    folder = marian[0]
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    _write_generation(tmp_path, bad_words_ids=[[5], [7, 8], [0]])  # 0 is </s>: never banned, or nothing ends
    _, cfg, _ = load_hf_model(tmp_path)
    assert cfg.suppress_ids == [5, 96]


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "generation_config.json is unreadable"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"num_beams": "four"}', "num_beams must be a whole number"),
        ('{"max_length": 0}', "max_length must be a whole number"),
        ('{"length_penalty": true}', "length_penalty must be a number"),
        ('{"forced_eos_token_id": -1}', "forced_eos_token_id must be a token id ≥ 0"),
        ('{"forced_eos_token_id": 100000}', "forced_eos_token_id 100000 of generation_config.json lies outside"),
        ('{"bad_words_ids": [5]}', "bad_words_ids must be a list of lists"),
        ('{"bad_words_ids": [[100000]]}', "lie outside the vocabulary"),
    ],
)
def test_a_broken_generation_config_is_a_clear_error(marian, tmp_path, content, says):
    folder = marian[0]
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    (tmp_path / "generation_config.json").write_text(content, encoding="utf-8")
    with pytest.raises(CheckpointError, match=says):
        load_hf_model(tmp_path)


# --- decodings with it, against generate() ----------------------------------------------------------------------
@pytest.mark.parametrize("eos", ["config", "varied"])
def test_greedy_with_the_generation_config_equals_generate(marian, monkeypatch, eos):
    folder, reference, model, generation = marian
    eos_id = model.cfg.eos_id
    if eos == "varied":  # a token the model says, so that some rows stop before the cap
        eos_id = _varied_stop_token([_until(r, 0) for r in _generate(reference, folder, SOURCES, num_beams=1)])
        monkeypatch.setattr(model, "cfg", dataclasses.replace(model.cfg, eos_id=eos_id))
    lengths = []
    for src in SOURCES:
        cap = decoding_cap(model.cfg, src, generation)
        assert cap == 7 != default_max_new_tokens(model.cfg, len(src))  # the folder's cap, not ours
        ours = state.new_stepper(model, src, generation)  # the Translate page's decoding
        ours.run_to_end()
        assert ours.generated == _generate(reference, folder, [src], True, num_beams=1, eos_token_id=eos_id)[0]
        lengths.append(len(ours.generated))
        if len(ours.generated) == 7:  # at the cap: the config's </s>, forced unless the model chose it
            assert ours.generated[-1] == 0 and ours.records[-1].forced == (ours.records[-1].top(1)[0][0] != 0)
    assert max(lengths) == 7 and (eos == "config" or min(lengths) < 7)  # stopped at the cap, and at </s>
    assert any(
        ours.records[-1].forced
        for ours in [state.new_stepper(model, s, generation) for s in SOURCES]
        if (ours.run_to_end() or True)
    )  # the tiny model runs on: the cap forces </s> somewhere


@pytest.mark.parametrize("eos", ["config", "varied"])
def test_beam_search_with_the_generation_config_equals_generate(marian, monkeypatch, eos):
    folder, reference, model, generation = marian
    eos_id = model.cfg.eos_id
    if eos == "varied":
        eos_id = _varied_stop_token([_until(r, 0) for r in _generate(reference, folder, SOURCES, num_beams=1)])
        monkeypatch.setattr(model, "cfg", dataclasses.replace(model.cfg, eos_id=eos_id))
    settings, _ = lab.settings_from_link({}, model.cfg.vocab_size, generation)
    assert (settings["beam"], settings["alpha"]) == (3, 0.0)
    for src in SOURCES:
        result = beam_search(
            model, src, settings["beam"], settings["alpha"], max_new_tokens=decoding_cap(model.cfg, src, generation)
        )
        theirs = _generate(reference, folder, [src], eos_token_id=eos_id)[0]
        assert _until(list(result.hypotheses[0].tokens), eos_id) == _until(theirs, eos_id), src


def test_gpt2_greedy_stops_at_the_generation_configs_max_length(tmp_path):
    reference = write_tiny_gpt2_model(tmp_path)
    _write_generation(tmp_path, bos_token_id=100, eos_token_id=100, max_length=10)
    model, _, info = load_hf_model(tmp_path)
    for prompt in PROMPTS:  # <|endoftext|> then 5 tokens: the prompt our decoder-only decoding starts from
        ours = state.new_stepper(model, prompt[1:], info["generation"])
        assert ours.prefix == prompt and ours.max_new_tokens == 4
        ours.run_to_end()
        theirs = reference.generate(
            input_ids=torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt)),
            generation_config=transformers.GenerationConfig.from_pretrained(tmp_path),
            pad_token_id=100,
        )
        assert ours.generated == theirs[0, len(prompt) :].tolist()


# --- in the app ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def app_root(tmp_path_factory):
    """One opus-mt folder with a tokenizer and an opus-mt generation_config.json (beam 5, no length penalty)."""
    root = tmp_path_factory.mktemp("hf-gen-app")
    tok = write_tiny_marian_tokenizer(root / "opus-mt-gen")
    write_tiny_marian_model(
        root / "opus-mt-gen", vocab_size=tok["vocab_size"], pad_id=tok["pad_id"], eos_id=tok["eos_id"]
    )
    _write_generation(
        root / "opus-mt-gen", bad_words_ids=[[tok["pad_id"]]], max_length=6, num_beams=5, forced_eos_token_id=0
    )
    return root


def test_the_translation_uses_the_folders_length_cap(app_root, monkeypatch):
    monkeypatch.setattr(heavy, "GATE", heavy.Gate())
    ckpt = load_checkpoint(app_root / "opus-mt-gen")
    assert ckpt.generation.max_length == 6
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, "The cat sat on the mat.", input_limit(cfg), cfg.eos_id, cfg.unk_id)
    run = state.greedy_run(ckpt, src)
    fresh = Stepper(ckpt.model, list(src.ids), max_new_tokens=5, forced_eos_id=0)
    fresh.run_to_end()
    assert list(run.tokens) == fresh.tokens and len(fresh.generated) <= 5
    # the tiny model runs on to the cap, where the folder's forced_eos_token_id ends it with </s>
    assert run.records[-1].forced and run.tokens[-1] == 0 == ckpt.generation.forced_eos_token_id
    unforced = Stepper(ckpt.model, list(src.ids), max_new_tokens=5)
    unforced.run_to_end()
    assert unforced.tokens[:-1] == fresh.tokens[:-1] and unforced.tokens[-1] != 0


@pytest.mark.parametrize("page, key", [("translate", "step"), ("decoding", "step")])
def test_the_pages_say_when_the_last_token_was_forced(app_root, monkeypatch, page, key):
    at = open_app(monkeypatch, app_root, "opus-mt-gen", page, text="The cat sat on the mat.", **{key: "5"})
    assert_clean(at)
    said = [c.value for c in at.caption if "forced_eos_token_id" in c.value]
    assert len(said) == 1 and "generation_config.json ends a decoding that reaches its length limit" in said[0], [
        c.value for c in at.caption
    ]
    earlier = open_app(monkeypatch, app_root, "opus-mt-gen", page, text="The cat sat on the mat.", **{key: "4"})
    assert not any("forced_eos_token_id" in c.value for c in earlier.caption)


def test_the_decoding_lab_takes_the_folders_beam_width_and_says_so(app_root, monkeypatch):
    at = open_app(monkeypatch, app_root, "opus-mt-gen", "decoding", strategy="beam")
    assert_clean(at)
    assert at.slider(key="dl_w_beam").value == 5 and at.slider(key="dl_w_alpha").value == lab.DEFAULTS["alpha"]
    captions = [c.value for c in at.caption]
    assert "Beam width 5 from this model's generation_config.json." in captions, captions
    at = open_app(monkeypatch, app_root, "opus-mt-gen", "decoding", beam="2")  # a link's value still wins
    assert at.slider(key="dl_w_beam").value == 2


def test_the_labs_defaults_come_from_the_generation_config_within_the_widgets_ranges():
    assert lab.settings_from_link({}, 100)[0] == lab.DEFAULTS  # our own checkpoints: the lab's
    own, notes = lab.settings_from_link({}, 100, GenerationDefaults(num_beams=12, length_penalty=-1.0))
    assert (own["beam"], own["alpha"], notes) == (lab.BEAM_RANGE[1], lab.ALPHA_RANGE[0], [])
    note = GenerationDefaults(num_beams=4, length_penalty=1.0).beam_note()
    assert note.startswith("Beam width 4 and length penalty 1 from this model's generation_config.json (")
    assert "((5 + length) / 6)^α" in note and GenerationDefaults().beam_note() is None
