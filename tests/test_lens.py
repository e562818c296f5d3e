"""The logit lens (reading/lens.py) against the model itself, and its two drawings (viz/lens.py).

At the last layer the lens must be the model's own output distribution, the one the decoding chose from (pre-LN and
post-LN, encoder-decoder and decoder-only, greedy, sampled and forced); at every other layer it must be what a copy
of the model cut after that layer outputs (the same final LayerNorm and projection on a shorter stack). The shipped
models are checked too (skipped where missing); Hugging Face folders: ``test_lens_hf.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from app_pages.decoding import lab
from decoding.decoded import decode
from decoding.sampling import SamplingConfig
from decoding.stepping import Stepper
from reading.lens import TOP_K, Lens, final_norm_applies, logit_lens
from viz.lens import lens_figure, lens_table_html, lens_table_svg

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-6  # probabilities


def full_lens(model, src, decoding) -> Lens:
    """The lens keeping every piece of the vocabulary: the whole distribution of every layer at every step."""
    return logit_lens(model, src, decoding.prefix, decoding.generated, k=model.cfg.vocab_size)


def distribution(lens_step, layer: int, vocab: int) -> torch.Tensor:
    """A layer's whole distribution ``[vocab]`` from a lens kept with ``k = vocab``."""
    out = torch.zeros(vocab, dtype=torch.float64)
    out[list(lens_step.top_ids[layer])] = torch.tensor(lens_step.top_probs[layer], dtype=torch.float64)
    return out


def assert_last_layer_is_the_output(model, src, decoding) -> Lens:
    lens = full_lens(model, src, decoding)
    assert len(lens.steps) == decoding.n_steps
    vocab = model.cfg.vocab_size
    for record, step in zip(decoding.records, lens.steps, strict=True):
        ids = [t for t, _ in record.kept]  # a shared decoding keeps the top tokens, the chosen and the banned ones
        own = torch.tensor([record.log_prob(t) for t in ids], dtype=torch.float64).exp()
        assert torch.max(torch.abs(distribution(step, -1, vocab)[ids] - own)) <= TOL
        assert step.token_id == record.token_id
        assert abs(step.chosen_probs[-1] - record.prob) <= TOL
    return lens


def truncated(model, layers: int):
    """A copy of ``model`` whose decoder stops after its first ``layers`` layers (its final LayerNorm, if any, and
    its projection kept): its output is, by definition, the lens at layer ``layers``."""
    short = copy.deepcopy(model)
    short.decoder_layers = torch.nn.ModuleList(list(short.decoder_layers)[:layers])
    return short


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_the_lens_records_the_streams_alone_and_they_are_the_traces(make_model, encode_src, arch, monkeypatch):
    from reading import lens as lens_module
    from reading.trace import trace_pair

    model = make_model(arch=arch, n_decoder_layers=3)
    src = encode_src("The house is big.")
    src_ids = src if arch == "encoder-decoder" else None
    tgt = [model.cfg.bos_id] + (list(src[:3]) if src_ids is None else [5, 6, 7])
    got, traced = lens_module.streams_pair(model, src_ids, tgt), trace_pair(model, None, src_ids, tgt).streams
    assert set(got) == set(traced) and all(torch.allclose(got[s], traced[s], atol=1e-5) for s in got)
    recorders = []
    real = lens_module.streams_pair
    monkeypatch.setattr(lens_module, "streams_pair", lambda *a: recorders.append(a) or real(*a))
    decoding = decode(Stepper(model, src, max_new_tokens=4))
    logit_lens(model, src, decoding.prefix, decoding.generated)
    assert len(recorders) == 1  # one pass, of the streams alone
    from model.recorder import Recorder

    recorder = Recorder(modules=False)
    with torch.inference_mode():
        model.decode(torch.tensor([tgt]), recorder=recorder) if src_ids is None else model.decode(
            torch.tensor([tgt]), model.encode(torch.tensor([src_ids]), recorder=recorder)[0], recorder=recorder
        )
    assert not recorder.attention and len(recorder.streams["decoder"]) == 4  # no module recorded; 3 layers + input


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-LN", "post-LN"])
def test_every_layer_is_the_model_cut_after_it_and_the_last_is_its_output(make_model, encode_src, arch, norm_first):
    model = make_model(arch=arch, norm_first=norm_first, n_decoder_layers=3, logits_bias=not norm_first)
    if not norm_first:  # a non-zero bias, as Marian's final_logits_bias, must be in every layer's readout
        with torch.no_grad():
            model.generator.bias.normal_(0, 1.0)
    src = encode_src("The house is big.")
    decoding = decode(Stepper(model, src, max_new_tokens=6))
    lens = assert_last_layer_is_the_output(model, src, decoding)
    assert lens.final_norm is norm_first is final_norm_applies(model)
    for layers in (1, 2):
        replay = Stepper(truncated(model, layers), src, max_new_tokens=6)  # the cut model, fed the same tokens
        for step, token in zip(lens.steps, decoding.generated, strict=True):
            record = replay.step(lambda _log_probs, t=token: t)
            got = distribution(step, layers - 1, model.cfg.vocab_size)
            assert torch.max(torch.abs(got - record.log_probs.double().exp())) <= TOL


def test_sampled_and_forced_tokens_are_the_tokens_the_lens_follows(make_model, encode_src):
    model = make_model()
    src = encode_src("Good night.")
    forced = {2: 7}
    decoding = lab.lab_decoding(model, src, SamplingConfig("sample", 1.5, 0, 1.0, 3).validate(), forced, 6)
    lens = assert_last_layer_is_the_output(model, src, decoding)
    assert lens.steps[1].token_id == 7
    for step in lens.steps:  # the rank says whether the token taken is the layer's top guess
        for layer, rank in enumerate(step.chosen_ranks):
            assert (rank == 1) == (step.top_ids[layer][0] == step.token_id) or step.top_probs[layer][
                0
            ] == step.chosen_probs[layer]  # a tie
        first = step.first_top_layer
        assert first is None or (step.chosen_ranks[first] == 1 and all(r > 1 for r in step.chosen_ranks[:first]))


def test_the_lens_is_small_and_frozen(make_model, encode_src):
    model = make_model(n_decoder_layers=2)
    src = encode_src("The dog is small.")
    decoding = decode(Stepper(model, src, max_new_tokens=5))
    lens = logit_lens(model, src, decoding.prefix, decoding.generated)
    assert lens.k == TOP_K and lens.n_layers == 2 and len(lens.steps) == decoding.n_steps
    step = lens.steps[0]
    assert len(step.top_ids) == 2 and all(len(row) == TOP_K for row in step.top_ids)
    values = [v for s in lens.steps for f in dataclasses.fields(s) for v in np.ravel(getattr(s, f.name))]
    assert all(isinstance(v, (int, float, np.integer, np.floating)) for v in values)  # no tensor kept
    assert all(isinstance(getattr(s, f.name), (int, tuple)) for s in lens.steps for f in dataclasses.fields(s))
    with pytest.raises(dataclasses.FrozenInstanceError):
        lens.steps = ()  # type: ignore[misc]
    # the top guesses come most probable first and within 0–1
    assert all(
        row == tuple(sorted(row, reverse=True)) and 0 <= row[-1] <= row[0] <= 1
        for s in lens.steps
        for row in s.top_probs
    )


def test_bad_input_raises_a_clear_error(make_model, encode_src):
    model = make_model()
    with pytest.raises(ValueError, match="needs src_ids"):
        logit_lens(model, None, [1], [5, 6])
    with pytest.raises(ValueError, match="prefix"):
        logit_lens(model, encode_src("Yes, please."), [], [5])
    with pytest.raises(ValueError, match="positions"):
        logit_lens(model, encode_src("Yes, please."), [1], [5] * (model.cfg.max_len + 2))


@pytest.mark.parametrize(
    "name, text", [("en-de", "My brother lives in Berlin."), ("brown-lm", "She looked at him and")]
)
def test_the_shipped_models_last_layer_is_their_output(name, text):
    folder = ROOT / "checkpoints" / name
    if not (folder / "model.safetensors").is_file():
        pytest.skip(f"checkpoints/{name} is missing")
    from decoding.stepping import input_limit, prepare_source
    from model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(folder)
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id).ids
    decoding = decode(Stepper(ckpt.model, src, max_new_tokens=8))
    lens = assert_last_layer_is_the_output(ckpt.model, src, decoding)
    assert cfg.norm_first and lens.final_norm  # both shipped models are pre-LN: the final LayerNorm is applied
    assert lens.n_layers == cfg.n_decoder_layers


# --- viz --------------------------------------------------------------------------------------------------------
def _table(draw=lens_table_html, **overrides) -> str:
    args = dict(
        layer_labels=["1", "2", "3"],
        top_pieces=[["▁a", "<b>"], ["▁lebt", "▁a"], ["▁lebt", "x"]],
        top_probs=[[0.5, 0.2], [0.6, 0.3], [0.9, 0.05]],
        chosen_cols=[None, 0, 0],
        chosen_probs=[0.01, 0.6, 0.9],
        chosen_ranks=[7, 1, 1],
        chosen_piece="▁lebt",
        first_top=1,
        title="Step 3: what each decoder layer would predict",
    )
    args.update(overrides)
    return draw(**args)


def test_the_svg_of_a_step_is_a_valid_picture_of_the_same_table():
    import xml.etree.ElementTree as ET

    svg = _table(lens_table_svg)
    root = ET.fromstring(svg)  # well-formed: every piece escaped ("<b>" is text)
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg" and float(root.get("width")) > 0 and float(root.get("height")) > 0
    cells = root.findall(f"{ns}g")
    assert [(g.get("data-layer"), g.get("data-p")) for g in cells] == [
        ("0", "0.5000"),
        ("0", "0.2000"),
        ("1", "0.6000"),
        ("1", "0.3000"),
        ("2", "0.9000"),
        ("2", "0.0500"),
    ]
    assert [g.get("data-layer") for g in cells if g.get("data-chosen")] == ["1", "2"]
    texts = ["".join(t.itertext()) for t in root.iter(f"{ns}text")]
    assert "<b>" in texts and "2 ★" in texts and "3 · output" in texts and "1.0% #7" in texts
    assert any(t.startswith("★ layer 2") for t in texts)
    assert "Step 3: what each decoder layer would predict" in texts
    wide = ET.fromstring(_table(lens_table_svg, top_pieces=[["▁" + "x" * 40, "a"], ["▁lebt", "a"], ["▁lebt", "x"]]))
    assert float(wide.get("width")) > float(root.get("width"))  # a long piece widens its columns
    with pytest.raises(ValueError, match="one entry per layer"):
        _table(lens_table_svg, chosen_probs=[0.1])


def test_the_table_has_a_row_per_layer_marks_the_token_taken_and_escapes_pieces():
    html = _table()
    assert len(re.findall(r"<tr data-layer=", html)) == 3
    assert re.findall(r'<tr data-layer="(\d)" data-p="([\d.]+)"', html) == [
        ("0", "0.0100"),
        ("1", "0.6000"),
        ("2", "0.9000"),
    ]
    assert html.count("data-chosen") == 2  # not among layer 1's top pieces
    assert "2 ★" in html and html.count("★") == 2  # the row and the note
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert "#7" in html and "1.0%" in html
    assert "No layer ranks it first." in _table(first_top=None)
    # presentation mode's CSS recolours a div that names a colour and enlarges a monospace span: neither is used
    assert not re.search(r'<div style="[^"]*color', html) and not re.search(r'<span style="[^"]*monospace', html)
    assert "16px" in _table(large=True) and "16px" not in html
    assert html.count(">output<") == 1
    with pytest.raises(ValueError, match="one entry per layer"):
        _table(chosen_probs=[0.1, 0.2])


def test_the_heatmap_holds_every_step_and_layer_and_labels_cells_when_they_fit():
    probs = np.array([[0.1, 0.2], [0.3, 0.4], [0.9, 0.8]])
    guesses = [["▁a", "▁b"], ["▁c", "▁d"], ["▁e", "▁f"]]
    fig = lens_figure(probs, guesses, ["1 ▁e", "2 ▁f"], ["1", "2", "3 · output"], title="Every step so far")
    heat = fig.data[0]
    np.testing.assert_allclose(np.asarray(heat.z), probs)
    assert heat.zmin == 0 and heat.zmax == 1
    assert list(np.asarray(heat.text)[2]) == ["▁e", "▁f"]
    assert list(fig.layout.yaxis.ticktext) == ["1", "2", "3 · output"]
    narrow = lens_figure(
        np.zeros((3, 40)), [["▁abcdefgh"] * 40] * 3, [f"{i}" for i in range(40)], ["1", "2", "3"], width=430
    )
    assert narrow.data[0].text is None  # too narrow for its text: the hover keeps it
    with pytest.raises(ValueError, match="do not fit"):
        lens_figure(probs, guesses, ["1"], ["1", "2", "3"])
