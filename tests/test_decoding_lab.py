"""The decoding lab's pieces without Streamlit: its figure builders (``charts.next_token``, ``charts.beam``,
``charts.kv_cache``: the sampling pipeline, the beam tree, the KV cache) and its state (``app_pages.decoding.lab``:
replayable runs, forcing, the link's settings, step views, the cache comparison), on the tiny model of
``conftest.py``."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from app_pages.decoding import lab
from charts.beam import beam_tree_figure
from charts.kv_cache import cache_bytes, kv_cache_figure
from charts.next_token import pipeline_figure
from decoding.beam import beam_search
from decoding.decoded import StepView
from decoding.sampling import Chooser, Pipeline, SamplingConfig, choose_next
from decoding.stepping import Stepper
from viz.theme import ACCENT, GREY

torch.set_num_threads(1)


def _piece(i: int) -> str:
    return f"▁t{i}"


# --- viz: the sampling pipeline ---------------------------------------------------------------------------
def _pipeline(vocab=40, seed=0, **cfg) -> Pipeline:
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(seed)) * 2
    return choose_next(logits, SamplingConfig(**cfg), torch.Generator().manual_seed(seed))


def test_pipeline_figure_has_four_stages_over_the_top_tokens_and_marks_the_cut():
    pipe = _pipeline(strategy="sample", temperature=0.7, top_k=5)
    fig = pipeline_figure(pipe, _piece, top=15, temperature=0.7)
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == ["logits", "scaled", "probs", "final"]
    rows = fig.layout.meta["token_ids"]
    assert len(rows) == 15 and all(len(t.x) == 15 for t in bars)
    raw = torch.softmax(pipe.logits, -1)
    assert rows == torch.argsort(raw, descending=True, stable=True)[:15].tolist()  # raw-probability order
    np.testing.assert_allclose(bars[1].x, (pipe.logits / 0.7)[rows].numpy(), rtol=1e-6)
    kept = fig.layout.meta["kept"]
    assert kept == pipe.keep[rows].tolist() and sum(kept) == 5
    # Removed tokens: grey bars and struck-through labels; kept ones neither.
    labels = fig.layout.yaxis.ticktext
    for r, k in enumerate(kept):
        assert (bars[2].marker.color[r] == GREY) != k
        assert ("<s>" in labels[r]) != k
    chosen = fig.layout.meta["chosen"]
    assert rows[chosen] == pipe.token_id and bars[3].marker.color[chosen] == ACCENT
    assert [r for r, c in enumerate(bars[3].marker.color) if c == ACCENT] == [chosen]
    assert math.isclose(sum(bars[3].x), float(pipe.final[rows].sum()), rel_tol=1e-6)


def test_pipeline_labels_show_quotes_and_escape_markup():
    """Plotly shows ``&quot;`` literally: a ``"`` token must stay a quote, ``<`` / ``&`` must still be escaped."""
    pieces = {0: '"', 1: "<b>", 2: "a&b"}
    pipe = _pipeline(vocab=3)
    labels = pipeline_figure(pipe, lambda i: pieces[i], top=3).layout.yaxis.ticktext
    text = " ".join(labels)
    assert '"' in text and "&quot;" not in text
    assert "&lt;b&gt;" in text and "a&amp;b" in text


def test_pipeline_figure_adds_a_forced_token_outside_the_top_rows():
    pipe = _pipeline(strategy="greedy")
    rare = int(torch.argmin(pipe.logits))
    forced = Pipeline(pipe.logits, pipe.scaled, pipe.probs, pipe.keep, pipe.final, rare)
    fig = pipeline_figure(forced, _piece, top=15, forced=True)
    assert len(fig.layout.meta["token_ids"]) == 16 and fig.layout.meta["chosen"] == 15
    assert "forced" in fig.layout.title.text
    assert sum(fig.layout.meta["kept"]) == 1  # greedy keeps only the argmax


# --- viz: beam tree, KV cache -------------------------------------------------------------------------------
def test_beam_tree_has_one_node_per_candidate_and_draws_the_best_path(make_model, encode_src):
    model = make_model()
    result = beam_search(model, encode_src("The cat sleeps."), beam_size=3, alpha=0.6, max_new_tokens=8)
    fig = beam_tree_figure(result, _piece, eos_id=model.cfg.eos_id, title="t")
    by_name = {t.name: t for t in fig.data}
    cands = by_name["candidates"]
    flat = [c for step in result.steps for c in step]
    assert len(cands.x) == len(flat) == sum(len(s) for s in result.steps)
    assert list(cands.x) == [float(t + 1) for t, s in enumerate(result.steps) for _ in s]
    assert [c == GREY for c in cands.marker.color].count(True) == sum(not c[3] for c in flat)
    best = result.hypotheses[0]
    path = by_name["best path"]
    assert len(path.x) == len(best.tokens) + 1 and path.x[0] == 0  # from the root to the last token
    assert list(cands.marker.color).count(ACCENT) == len(best.tokens)


def test_kv_cache_figure_marks_the_new_rows():
    fig = kv_cache_figure(
        3,
        positions=5,
        new_rows=1,
        src_len=7,
        target_tokens=["<bos>", "a", "b", "c", "d"],
        source_tokens=list("abcdef") + ["<eos>"],
    )
    self_z, cross_z = (np.asarray(t.z, dtype=float) for t in fig.data if t.type == "heatmap")
    assert self_z.shape == (6, 5) and cross_z.shape == (6, 7)  # 2 (K, V) × layers rows
    assert (self_z == 2).sum() == 6 and (self_z[:, -1] == 2).all() and (self_z[:, :-1] == 1).all()
    assert (cross_z == 3).all()
    first = kv_cache_figure(2, positions=1, src_len=4, cross_new=True)
    assert all((np.asarray(t.z, dtype=float) == 2).all() for t in first.data if t.type == "heatmap")
    kv_cache_figure(2, positions=0, src_len=4)  # an empty cache draws without error


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_cache_bytes_formula_equals_the_stepper_cache(make_model, encode_src, arch):
    model = make_model(arch=arch, n_heads=2, n_decoder_layers=3)
    src = encode_src("The house is big.")
    stepper = Stepper(model, src, max_new_tokens=6)
    assert cache_bytes(model.cfg, 0, len(src)) == stepper.cache.nbytes() == {"self": 0, "cross": 0, "total": 0}
    prompt = len(stepper.prefix) - 1  # a decoder-only model's first step feeds <bos> + the whole prompt
    assert prompt == (0 if arch == "encoder-decoder" else len(src) - 1)
    for n in range(1, 6):
        stepper.step(lambda lp: 5)  # never <eos>
        assert stepper.cache.positions == prompt + n
        expected = cache_bytes(model.cfg, prompt + n, len(src))
        assert expected == stepper.cache.nbytes(), n
    cfg = model.cfg
    assert expected["self"] == cfg.n_decoder_layers * cfg.n_heads * cfg.d_k * (prompt + 5) * 2 * 4
    assert expected["cross"] == (
        cfg.n_decoder_layers * cfg.n_heads * cfg.d_k * len(src) * 2 * 4 if arch == "encoder-decoder" else 0
    )
    assert cache_bytes(cfg, prompt + 5, len(src), bytes_per_value=2)["total"] == expected["total"] // 2


# --- app_pages.decoding.lab: replayable runs, forcing, URL parsing, cache comparison -------------------------------
def test_a_lab_decoding_replays_the_cli_sampling_and_is_frozen(make_model, encode_src):
    model = make_model()
    src = encode_src("She reads a book.")
    cfg = SamplingConfig("sample", temperature=1.8, top_k=50, top_p=0.95, seed=11).validate()
    reference = Stepper(model, src, max_new_tokens=12)
    reference.run_to_end(Chooser(cfg))
    run = lab.lab_decoding(model, src, cfg, max_new_tokens=12)
    assert run.tokens_and_probs()[0] == reference.generated  # same seed, same tokens as decoding.translate
    again = lab.lab_decoding(model, src, cfg, max_new_tokens=12)  # a pure function of its arguments
    assert again.generated == run.generated
    assert all(torch.equal(a.final, b.final) for a, b in zip(again.pipelines, run.pipelines, strict=True))
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.generated = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.records[0].token_id = 3  # type: ignore[misc]
    with pytest.raises(RuntimeError, match="[Ii]nference"):  # a shared distribution cannot be written into
        run.records[0].cross_attention.zero_()


def test_forcing_a_token_redoes_that_step_and_keeps_earlier_ones(make_model, encode_src):
    model = make_model()
    src = encode_src("The dog is small.")
    before = lab.lab_decoding(model, src, SamplingConfig("greedy"), max_new_tokens=8)
    forced = lab.forced_after({5: 9}, 2, 77)  # forcing at step 2 drops the later forced step 5
    assert forced == {2: 77}
    run = lab.lab_decoding(model, src, SamplingConfig("greedy"), forced, max_new_tokens=8)
    view = StepView.of(run, 4)
    assert view.generated[:2] == (before.generated[0], 77) and view.forced_at(2) and not view.forced_at(1)
    assert run.forced_map == {2: 77} and run.forced == ((2, 77),)
    assert run.pipelines[1].token_id == 77 and run.suggested[1] == before.generated[1]
    assert math.isclose(run.records[1].prob, math.exp(run.records[1].log_prob(77)), rel_tol=1e-5)
    assert lab.lab_decoding(model, src, SamplingConfig("greedy"), {}, max_new_tokens=8).generated == before.generated


def test_settings_from_the_link_are_clamped_or_ignored_with_notes():
    settings, notes = lab.settings_from_link(
        {
            "temperature": "-1",
            "top_p": "7",
            "top_k": "999999",
            "seed": "nan",
            "beam": "100",
            "alpha": "inf",
            "strategy": "nucleus",
            "guard": "maybe",
        },
        vocab_size=2000,
    )
    assert settings == dict(lab.DEFAULTS, temperature=0.05, top_p=1.0, top_k=2000, beam=8)
    text = " ".join(notes)
    for name in ("temperature", "top_p", "top_k", "seed", "beam", "alpha", "strategy", "guard"):
        assert f"`{name}`" in text, name
    assert "nucleus" in text and "showing 2000" in text
    ok, none = lab.settings_from_link(
        {
            "strategy": "sample",
            "temperature": "0.7",
            "top_k": "40",
            "top_p": "0.9",
            "seed": "3",
            "beam": "5",
            "alpha": "1",
            "guard": "1",
        },
        vocab_size=2000,
    )
    assert none == [] and ok == dict(
        strategy="sample", temperature=0.7, top_k=40, top_p=0.9, seed=3, beam=5, alpha=1.0, guard=True
    )
    lab.sampling_config(settings)  # always valid


def test_a_step_view_is_the_run_as_it_stood_at_that_step(make_model, encode_src):
    """StepView.of(finished decoding, k) equals a decoding stepped to k: the pages draw views of one cached
    finished decoding."""
    model = make_model()
    src = encode_src("The house is big.")
    cfg = SamplingConfig("sample", 0.9, 0, 1.0, 5)
    full = lab.lab_decoding(model, src, cfg, {2: 77}, max_new_tokens=8)
    for k in range(0, full.n_steps + 1):
        stepper, chooser = Stepper(model, src, max_new_tokens=8), Chooser(cfg)
        for step in range(1, k + 1):
            stepper.step(lambda lp, step=step, chooser=chooser: chooser(lp) if step != 2 else (chooser(lp), 77)[1])
        view = StepView.of(full, k)
        assert view.generated == tuple(stepper.generated) and view.step == k
        assert view.finished == stepper.finished
        assert view.cache_positions == stepper.cache.positions
        assert view.cache_nbytes() == stepper.cache.nbytes()
        assert view.forced_at(2) == (k >= 2)
        assert view.output_ids() == stepper.output_ids()


def test_two_sessions_step_one_shared_decoding_independently(make_model, encode_src):
    """What the server shares is a value: two visitors at different steps of one cached decoding each see their
    own step, and neither view changes the decoding or the other view."""
    model = make_model()
    src = encode_src("The house is big.")
    shared = lab.lab_decoding(model, src, SamplingConfig("greedy"), max_new_tokens=8)
    tokens, records = shared.generated, shared.records
    alice, bob = StepView.of(shared, 1), StepView.of(shared, shared.n_steps)
    for step in range(shared.n_steps, -1, -1):  # Bob steps back while Alice steps forward
        bob = StepView.of(shared, step)
        alice = StepView.of(shared, min(alice.step + 1, shared.n_steps))
        assert bob.generated == tokens[:step] and alice.generated == tokens[: alice.step]
    assert shared.generated == tokens and shared.records == records and shared.n_steps == len(tokens)
    assert not any(hasattr(shared, name) for name in ("step", "back", "goto", "reset", "set_forced"))


def test_compare_cache_gives_the_same_log_probs(make_model, encode_src):
    model = make_model()
    res = lab.compare_cache(model, encode_src("Good night."), [5, 6, 7, 8], repeats=1)
    assert res.steps == 4 and res.max_abs_diff < 1e-4 and res.ms_per_step_on > 0 and res.ms_per_step_off > 0


def test_resolve_piece(tokenizer):
    # A word-start piece whose text without ▁ is not a piece of its own: typing it without ▁ finds the ▁ piece.
    piece = next(
        p
        for p in (tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size))
        if p.startswith("▁") and len(p) > 2 and tokenizer.token_to_id(p[1:]) is None
    )
    assert lab.resolve_piece(tokenizer, piece) == tokenizer.token_to_id(piece)
    assert lab.resolve_piece(tokenizer, piece[1:]) == tokenizer.token_to_id(piece)
    assert lab.resolve_piece(tokenizer, "_" + piece[1:]) == tokenizer.token_to_id(piece)
    assert lab.resolve_piece(tokenizer, "qqqqzzzz") is None and lab.resolve_piece(tokenizer, "  ") is None
