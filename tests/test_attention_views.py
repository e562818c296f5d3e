"""The Attention page's views, as ``AppTest`` runs of ``app_pages/attention/attention.py`` with the shipped checkpoint:
every tab, ablation, word level, the URL, Compare. The pure pieces behind them are tested in
``test_attention_figures.py``. As in ``test_app.py``, nothing asserts particular German words: the model in
``checkpoints/en-de`` may be replaced.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from reading.analysis import word_ids
from ui.model_card import opening_layer

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CKPT = ROOT / "checkpoints" / "en-de"
ATTENTION_PAGE = "app_pages/attention/attention.py"


# --- the page (AppTest) -------------------------------------------------------------------------------------------
streamlit_testing = pytest.importorskip("streamlit.testing.v1")
needs_model = pytest.mark.skipif(
    not (DEFAULT_CKPT / "model.safetensors").is_file(), reason="checkpoints/en-de is missing"
)
TABS = ["Heads", "Tokens & lines", "Query · key", "Model grid", "Summaries", "Head statistics", "Ablation", "Compare"]


@pytest.fixture
def cfg():
    from model.config import ModelConfig

    return ModelConfig.from_json(DEFAULT_CKPT / "config.json")


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_CHECKPOINTS", raising=False)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)


def open_page(tab: str | None = None, **query: str):
    at = streamlit_testing.AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page(ATTENTION_PAGE).run()  # the link opens the Attention page itself (Translate reads layer/head too)
    if tab:
        show(at, tab)
    return at


def show(at, tab: str):
    at.session_state["at_tab"] = tab  # what a click on the tab does (bound to ?tab=)
    at.run()
    assert_clean(at)
    return at


def assert_clean(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def z_of(trace: dict) -> np.ndarray:
    z = trace["z"]
    if isinstance(z, dict):  # plotly ships numpy arrays base64-encoded
        shape = tuple(int(n) for n in z["shape"].split(","))
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"])).reshape(shape)
    return np.array(z, dtype=float)


def source_pieces(text: str) -> list[str]:
    from decoding.stepping import prepare_source
    from model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(DEFAULT_CKPT)
    c = ckpt.config
    return prepare_source(ckpt.tokenizer, text, c.max_len, c.eos_id, c.unk_id).tokens


@needs_model
def test_every_tab_renders(cfg):
    at = open_page()
    assert [t.label for t in at.tabs] == TABS
    assert len(charts(at)) == cfg.n_heads  # Heads is the default tab: one chart per head
    L_cross = cfg.n_decoder_layers

    show(at, "Tokens & lines")
    figs = charts(at)
    assert [f["data"][0]["type"] for f in figs] == ["bar", "bar", "scatter"]
    assert at.selectbox(key="at_token_query").value == 0 and at.selectbox(key="at_token_key").value == 0
    at.selectbox(key="at_token_query").select(1).run()
    at.toggle(key="at_token_focus").set_value(True).run()
    assert_clean(at)
    lines = [t for t in charts(at)[2]["data"] if t.get("mode") == "lines"]
    assert lines and all(t["meta"][0] == 1 for t in lines)

    show(at, "Model grid")
    (grid,) = charts(at)
    assert sum(t["type"] == "heatmap" for t in grid["data"]) == L_cross * cfg.n_heads
    at.radio(key="at_grid_style").set_value("Altair (click a head to open it)").run()
    assert_clean(at)
    assert "head_pick" in at.get("vega_lite_chart")[0].proto.spec
    at.selectbox(key="at_grid_open").select(cfg.n_heads + 1).run()  # layer 2, head 2
    assert_clean(at)
    assert at.selectbox(key="at_layer").value == 1 and at.selectbox(key="at_head").value == 1
    assert charts(at)[-1]["layout"]["title"]["text"].endswith("layer 2 · head 2")
    assert at.query_params["layer"] == "2" and at.query_params["head"] == "2"

    show(at, "Summaries")
    figs = charts(at)
    assert sum(t["type"] == "heatmap" for t in figs[0]["data"]) == L_cross * 2  # mean and max per layer
    assert [f["layout"]["title"]["text"] for f in figs[1:]] == [
        "Rollout · Encoder self-attention",
        "Rollout · Decoder masked self-attention",
    ]
    for f in figs[1:]:
        assert np.allclose(np.nansum(z_of(f["data"][0]), axis=1), 1.0, atol=1e-4)
    assert any("No rollout for cross-attention" in i.value for i in at.info)

    show(at, "Head statistics")
    table = at.dataframe[0].value
    assert len(table) == L_cross * cfg.n_heads
    assert list(table.columns) == ["layer", "head", "entropy", "same", "previous", "first", "eos", "max"]
    at.selectbox(key="at_stat").select("max").run()
    assert_clean(at)
    assert z_of(charts(at)[0]["data"][0]).shape == (L_cross, cfg.n_heads)
    at.radio(key="at_kind").set_value("decoder").run()  # no <eos> among the decoder's keys
    assert_clean(at)
    assert "eos" not in at.dataframe[0].value.columns

    show(at, "Ablation")
    assert at.metric[0].label.startswith("Total log-prob") and len(at.multiselect) == 1
    assert len(at.download_button) == 1


@needs_model
def test_ablating_a_head_changes_the_total_and_the_sweep_draws_heatmaps(cfg):
    at = open_page("Ablation")
    before = len(charts(at))
    at.button(key="at_sweep").click().run()
    assert_clean(at)
    sweeps = charts(at)[before:]
    assert len(sweeps) == 3
    drops = {}
    for fig, kind in zip(sweeps, ("encoder", "decoder", "cross"), strict=True):
        hm = fig["data"][0]
        assert hm["type"] == "heatmap" and hm["zmid"] == 0  # diverging, centred at 0
        drops[kind] = z_of(hm)
        assert drops[kind].shape == (cfg.n_encoder_layers if kind == "encoder" else cfg.n_decoder_layers, cfg.n_heads)
    # one colour range for all three maps: ± the largest drop of any head
    bound = max(float(np.abs(d).max()) for d in drops.values())
    assert all((f["data"][0]["zmin"], f["data"][0]["zmax"]) == pytest.approx((-bound, bound)) for f in sweeps)
    at.run()  # the sweep stays on screen (cached) across reruns
    assert len(charts(at)) == before + 3

    kind, drop = max(drops.items(), key=lambda kv: np.abs(kv[1]).max())
    layer, head = np.unravel_index(np.abs(drop).argmax(), drop.shape)
    label = f"{kind} L{layer + 1} H{head + 1}"
    base = float(at.metric[0].value)
    at.multiselect(key="at_ablate").select(label).run()
    assert_clean(at)
    removed = float(at.metric[1].value)
    assert removed != pytest.approx(base, abs=1e-3)
    assert removed == pytest.approx(base - float(drop[layer, head]), abs=2e-3)  # the sweep agrees with the metric
    assert at.metric[1].proto.delta.startswith(("+", "-"))
    assert any(label in md.value and "Greedy translation without" in md.value for md in at.markdown)
    assert charts(at)[0]["data"][1]["name"] == "heads removed"


@needs_model
def test_word_level_toggle_merges_pieces_into_words(cfg):
    text = "Bobby likes blackberries."
    pieces = source_pieces(text)
    n_words = max(word_ids(pieces)) + 1
    at = open_page(kind="encoder", head="1", text=text)
    assert at.radio(key="at_kind").value == "encoder" and at.selectbox(key="at_head").value == 0
    assert z_of(charts(at)[0]["data"][0]).shape == (len(pieces), len(pieces))
    at.toggle(key="at_words").set_value(True).run()
    assert_clean(at)
    z = z_of(charts(at)[0]["data"][0])
    assert z.shape == (n_words, n_words) and n_words < len(pieces)
    assert np.allclose(z.sum(axis=1), 1.0, atol=1e-4)
    assert charts(at)[0]["layout"]["title"]["text"].endswith("· words")
    at.radio(key="at_kind").set_value("cross").run()
    assert_clean(at)
    assert z_of(charts(at)[0]["data"][0]).shape[1] == n_words
    show(at, "Model grid")
    grid = charts(at)[0]["data"]
    assert {z_of(t).shape[1] for t in grid} == {n_words}


@needs_model
@pytest.mark.parametrize(
    "query, layer",
    [
        ({"layer": "abc", "head": "99"}, "opened"),
        ({"layer": "-1", "head": "mean!"}, 1),  # clamped into 1…n
        ({"layer": "99", "head": "", "kind": "nonsense", "tab": "No such tab"}, "last"),
    ],
)
def test_garbage_layer_and_head_in_the_url_are_clamped_or_ignored_with_a_note(cfg, query, layer):
    query = dict(query)
    tab = query.pop("tab", None)
    at = open_page(**query)
    notes = " ".join(i.value for i in at.info)
    assert all(f"`{name}`" in notes for name in query), notes
    if tab:
        show(at, tab)
    assert_clean(at)
    opened = (
        opening_layer(json.loads((DEFAULT_CKPT / "card.json").read_text(encoding="utf-8")), cfg.n_decoder_layers) + 1
    )  # the layer the card opens the page on, else the last
    layer = {"last": cfg.n_decoder_layers, "opened": opened}.get(layer, layer)
    assert at.selectbox(key="at_layer").value == layer - 1
    assert at.selectbox(key="at_head").value == "all"
    # the corrected value replaces the garbage in the link, or takes it out where it is the default
    assert at.query_params.get("layer", str(opened)) == str(layer) and "head" not in at.query_params
    assert len(charts(at)) == cfg.n_heads


@needs_model
def test_layer_and_head_from_the_url_are_shared_by_the_tabs(cfg):
    at = open_page(layer="1", head="2", kind="decoder")
    assert at.selectbox(key="at_layer").value == 0 and at.selectbox(key="at_head").value == 1
    assert [f["layout"]["title"]["text"] for f in charts(at)] == ["Decoder masked self-attention · layer 1 · head 2"]
    show(at, "Model grid")
    grid = charts(at)[0]
    assert grid["layout"]["shapes"][0]["xref"] == "x2 domain"  # layer 1, head 2 is outlined
    assert at.selectbox(key="at_grid_open").value == 1
    at.selectbox(key="at_head").select("mean").run()
    assert_clean(at)
    assert at.query_params["head"] == "mean" and at.selectbox(key="at_grid_open").value is None
    again = open_page(**dict(at.query_params))
    assert again.selectbox(key="at_head").value == "mean" and again.radio(key="at_kind").value == "decoder"


# --- Compare ---------------------------------------------------------------------------------------------------
def test_difference_heatmap_is_second_minus_first_and_refuses_other_shapes():
    from viz.attention_views import difference_heatmap

    a = np.array([[0.5, 0.5], [0.2, 0.8]])
    b = np.array([[0.9, 0.1], [0.2, 0.8]])
    z = np.asarray(difference_heatmap(a, b, ["x", "y"], ["p", "q"]).data[0].z, dtype=float)
    assert np.allclose(z, b - a)
    with pytest.raises(ValueError):
        difference_heatmap(a, np.ones((3, 2)) / 2, ["x", "y"], ["p", "q"])


def test_compare_another_sentence_shows_both_and_explains_shapes():
    at = open_page("Compare", text="Bobby likes blackberries.")
    assert at.radio(key="at_cmp_mode").value == "another sentence"
    at.text_input(key="at_cmp_text").set_value("Time flies like an arrow.").run()
    assert_clean(at)
    assert len(charts(at)) >= 2
    # Different sentences tokenize to different lengths here: no difference map, and the page says why.
    assert any("different shapes" in i.value for i in at.info) or len(charts(at)) == 3


def test_compare_the_same_model_as_a_second_checkpoint_gives_a_zero_difference(tmp_path, monkeypatch):
    import shutil

    extra = tmp_path / "extra"
    shutil.copytree(DEFAULT_CKPT, extra / "en-de-copy")
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(extra))
    at = open_page("Compare")
    at.radio(key="at_cmp_mode").set_value("another checkpoint").run()
    assert_clean(at)
    assert at.selectbox(key="at_cmp_ckpt").value == "en-de-copy"
    specs = charts(at)
    assert len(specs) == 3  # first, second, difference
    diff = z_of(specs[2]["data"][0])
    assert np.nanmax(np.abs(diff)) < 1e-5


def test_compare_with_a_corrupt_checkpoint_warns(tmp_path, monkeypatch):
    import shutil

    extra = tmp_path / "extra"
    bad = extra / "broken"
    shutil.copytree(DEFAULT_CKPT, bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(extra))
    at = open_page("Compare")
    at.radio(key="at_cmp_mode").set_value("another checkpoint").run()
    assert not at.exception
    assert any("cannot be loaded" in w.value for w in at.warning)


def test_compare_with_only_another_architecture_says_plainly_why_not(tmp_path, monkeypatch):
    """The two shipped models differ in architecture: the tab says so and how to get a comparable checkpoint,
    instead of offering brown-lm and then warning that it cannot be compared."""
    monkeypatch.setenv("ATTENTION_EXPLORER_RUNS", str(tmp_path / "no-runs"))
    at = open_page("Compare")
    at.radio(key="at_cmp_mode").set_value("another checkpoint").run()
    assert_clean(at)
    assert not [s for s in at.selectbox if s.key == "at_cmp_ckpt"]
    text = " ".join(i.value for i in at.info)
    assert "No other encoder-decoder checkpoint" in text and "brown-lm (decoder-only)" in text
    assert "Training page" in text


def test_compare_offers_a_runs_checkpoints_of_the_same_architecture(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    for sub in ("best", "checkpoints/step-100", "evals/step-20", "evals/step-3"):
        folder = runs / "r1" / sub
        folder.mkdir(parents=True)
        for f in DEFAULT_CKPT.iterdir():
            (folder / f.name).symlink_to(f)
    (runs / "r1" / "checkpoints" / "step-200").mkdir()  # still being written: not listed
    monkeypatch.setenv("ATTENTION_EXPLORER_RUNS", str(runs))
    at = open_page("Compare")
    at.radio(key="at_cmp_mode").set_value("another checkpoint").run()
    assert_clean(at)
    box = at.selectbox(key="at_cmp_ckpt")
    assert box.options == [
        "runs/r1/best",
        "runs/r1/checkpoints/step-100",
        "runs/r1/evals/step-3",
        "runs/r1/evals/step-20",
    ]
    assert len(charts(at)) == 3  # first, second, difference (the same weights: zero)


def test_the_quality_line_counts_minutes_on_the_machine_the_card_names():
    """A GPU-trained card's minutes are GPU-minutes: calling them CPU-minutes would undersell a CPU by ~100×."""
    from types import SimpleNamespace

    from ui.model_card import minutes_unit, quality_line

    card = {
        "test": {"split": "Multi30K test2016", "bleu": 38.0, "chrf": 64.0},
        "everyday": {"chrf": 79.0},
        "total": {"train_minutes": 8.2},
        "device": "cuda:0",
    }
    config = SimpleNamespace(is_encoder_decoder=True)
    line = quality_line(SimpleNamespace(card=card, config=config))
    assert "trained 8 GPU-minutes" in line and "Multi30K test2016 BLEU 38.0" in line
    line = quality_line(SimpleNamespace(card={**card, "device": "cpu"}, config=config))
    assert "trained 8 CPU-minutes" in line
    assert minutes_unit(card) == "GPU-minutes" and minutes_unit({}) == "CPU-minutes"
    # A GPU run continued on two CPU cores names both machines' minutes, never one sum of the two.
    line = quality_line(SimpleNamespace(card={**card, "cpu_minutes": 89.4}, config=config))
    assert "trained 8 GPU-minutes and 89 CPU-minutes" in line
