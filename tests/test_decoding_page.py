"""The decoding lab's page (``app_pages/decoding/decoding.py``) driven by ``AppTest``; its figure builders and its
Streamlit-free state are tested in ``test_decoding_lab.py``.

The page is run through a small wrapper script that sets the checkpoint path the way ``app.py`` does and then
executes the page, so these tests do not depend on the page being registered in ``app.py``'s navigation.
``checkpoints/en-de`` is a placeholder model that will be replaced: nothing asserts particular German words.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from app_pages.decoding import lab
from decoding.beam import beam_search
from decoding.loops import LOOP_TIMES, find_loop
from model.tokenizer import TextTokenizer
from viz.token_labels import display_token

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "app_pages" / "decoding" / "decoding.py"
CKPT = ROOT / "checkpoints" / "en-de"
TIMEOUT = 60


# --- the page, with AppTest -----------------------------------------------------------------------------------
st_testing = pytest.importorskip("streamlit.testing.v1")
needs_ckpt = pytest.mark.skipif(not (CKPT / "model.safetensors").is_file(), reason="checkpoints/en-de is missing")

WRAPPER = f"""
import pathlib, runpy
import streamlit as st
st.session_state["app_ckpt_path"] = pathlib.Path({str(CKPT)!r})
runpy.run_path({str(PAGE)!r}, run_name="__main__")
"""


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)


def page(**query: str):
    at = st_testing.AppTest.from_string(WRAPPER, default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def clean(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def button(at, label_start: str):
    found = [b for b in at.button if b.label.startswith(label_start)]
    assert len(found) == 1, [b.label for b in at.button]
    return found[0]


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _z(trace: dict) -> np.ndarray:
    """A heatmap's ``z`` from a chart spec (plotly ships numpy arrays base64-encoded)."""
    z = trace["z"]
    if isinstance(z, dict):
        shape = tuple(int(n) for n in z["shape"].split(","))
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"])).reshape(shape)
    return np.array(z, dtype=float)


def shown(at, folder: Path = CKPT):
    """What the page shows, computed afresh here from the page's own state (its sentence, rule and forced tokens):
    the greedy or sampled decoding, or for beam search ``(result, states)``. The page keeps no decoding in the
    session; equal inputs give equal decodings."""
    from decoding.beam import beam_states
    from model.checkpoint import load_checkpoint
    from model.hf.generation import decoding_cap

    ckpt = load_checkpoint(folder)
    src_ids = list(at.session_state["dl_src_key"][2])
    settings = at.session_state["dl_settings"]
    limit = decoding_cap(ckpt.config, src_ids, ckpt.generation)
    loop_times = LOOP_TIMES if settings["guard"] else 0
    if settings["strategy"] == "beam":
        result = beam_search(
            ckpt.model,
            src_ids,
            int(settings["beam"]),
            float(settings["alpha"]),
            max_new_tokens=limit,
            loop_times=loop_times,
        )
        return result, beam_states(result, float(settings["alpha"]), ckpt.config.eos_id)
    return lab.lab_decoding(
        ckpt.model, src_ids, lab.sampling_config(settings), at.session_state["dl_forced"], limit, loop_times=loop_times
    )


def generated(at) -> list[int]:
    """The tokens generated up to the step the page shows."""
    return list(shown(at).generated[: at.session_state["dl_step"]])


@needs_ckpt
def test_page_renders_greedy_and_steps_forward_and_back():
    at = page()
    clean(at)
    assert at.radio(key="dl_w_strategy").value == "greedy"
    assert at.text_input(key="dl_text").value
    assert [b.label for b in at.button] == ["Reset", "Back", "Next", "Run to end"]
    assert not charts(at) and any("Next" in i.value for i in at.info)
    assert at.slider(key="dl_w_temperature").proto.disabled  # greedy ignores the sampling knobs

    button(at, "Next").click().run()
    clean(at)
    assert at.session_state["dl_step"] == 1 and at.query_params["step"] == "1"
    specs = charts(at)
    assert len(specs) == 2  # pipeline, KV cache; the alignment so far is an HTML grid
    assert [t["name"] for t in specs[0]["data"]] == ["logits", "scaled", "probs", "final"]
    (alignment,) = [m.value for m in at.markdown if 'class="ae-align"' in m.value]
    assert "Cross-attention so far" in alignment and alignment.count("<tr style=") == 1  # one row per step
    assert any("Sequence log-probability" in m.value for m in at.markdown)
    first = generated(at)

    button(at, "Run to end").click().run()
    clean(at)
    end = at.session_state["dl_step"]
    assert end >= 1 and button(at, "Next").proto.disabled
    full = generated(at)
    assert full[:1] == first
    kv = next(s for s in charts(at) if s["data"][0].get("name") == "self-attention cache")
    assert _z(kv["data"][0]).shape[1] == end  # one cached row per position fed
    button(at, "Measure").click().run()
    clean(at)
    assert any("Measured just now" in m.value for m in at.markdown)
    assert at.session_state["dl_cache_cmp"][1].max_abs_diff < 1e-3
    button(at, "Back").click().run()
    assert at.session_state["dl_step"] == end - 1 and generated(at) == full[:-1]
    button(at, "Next").click().run()
    clean(at)
    assert generated(at) == full  # Back then Next: the same state
    button(at, "Reset").click().run()
    assert at.session_state["dl_step"] == 0 and "step" not in at.query_params


@needs_ckpt
def test_sampling_with_a_seed_replays_and_the_link_reproduces_it():
    at = page()
    at.radio(key="dl_w_strategy").set_value("sample").run()
    assert not at.slider(key="dl_w_temperature").proto.disabled
    at.slider(key="dl_w_temperature").set_value(1.5)
    at.number_input(key="dl_w_seed").set_value(7)
    at.run()
    button(at, "Run to end").click().run()
    clean(at)
    tokens = generated(at)
    assert tokens and at.query_params["strategy"] == "sample" and at.query_params["seed"] == "7"
    assert at.query_params["temperature"] == "1.5"
    # Same seed in a fresh session (opened from the link): the same tokens.
    again = page(
        **{k: at.query_params[k] for k in ("text", "strategy", "seed", "temperature", "step") if k in at.query_params}
    )  # the default sentence is left out of the link
    clean(again)
    assert generated(again) == tokens and again.session_state["dl_step"] == len(tokens)


@needs_ckpt
def test_the_loop_guard_keeps_a_loop_from_the_rule_and_says_which_token():
    looping = (
        "No child should ever have to grow up in an environment that is not nurturing, caring, and "
        "educational, but they do."
    )  # "… die nicht nur nur nur nur …"
    free = page(text=looping, step="999")
    clean(free)
    assert find_loop(TextTokenizer.from_file(CKPT / "tokenizer.json").decode(generated(free)))
    at = page(text=looping, guard="1", step="14")  # 13 pieces to "… die nicht nur nur": a third "nur" would loop
    clean(at)
    assert at.checkbox(key="dl_w_guard").value and at.query_params["guard"] == "1"
    kept = [c.value for c in at.caption if "The loop guard kept" in c.value]
    assert len(kept) == 1 and "nur" in kept[0] and f"{LOOP_TIMES} times in a row" in kept[0]
    banned = shown(at).records[13].banned
    assert banned and shown(at).records[13].token_id not in banned
    chart = charts(at)[0]  # the pipeline: the banned token stands where the model put it, struck and marked
    row = chart["layout"]["meta"]["token_ids"].index(banned[0])
    assert not chart["layout"]["meta"]["kept"][row] and "<s>" in chart["layout"]["yaxis"]["ticktext"][row]
    assert chart["data"][2]["text"][row] == "banned" and chart["data"][0]["x"][row] < 0
    button(at, "Run to end").click().run()
    clean(at)
    assert not find_loop(TextTokenizer.from_file(CKPT / "tokenizer.json").decode(generated(at)))
    at.radio(key="dl_w_strategy").set_value("beam").run()  # the guard holds in beam search too
    clean(at)
    result, _ = shown(at)
    tok = TextTokenizer.from_file(CKPT / "tokenizer.json")
    assert not any(find_loop(tok.decode(list(h.tokens))) for h in result.hypotheses)


@needs_ckpt
def test_forcing_a_token_creates_a_branch():
    at = page(step="2")
    clean(at)
    assert at.session_state["dl_step"] == 2
    (choice,) = [s for s in at.selectbox if s.label.startswith("Candidate")]  # its key follows the step's list
    alternative = choice.options[2]  # the third most probable, shown as text; the value is the id
    choice.select_index(2)
    button(at, "Force this token").click().run()
    clean(at)
    token = at.session_state["dl_forced"][2]
    assert display_token(TextTokenizer.from_file(CKPT / "tokenizer.json").id_to_token(token)) in alternative
    assert generated(at)[1] == token and at.query_params["forced"] == f"2:{token}"
    assert any(h.value == "Branches" for h in at.subheader)
    table = at.dataframe[0].value
    assert list(table["branch"]) == ["as decoded", "branch 1"]
    # An unknown piece gives a warning and changes nothing.
    at.text_input(key="dl_force_text").input("qqqzzzxx").run()
    button(at, "Force this token").click().run()
    clean(at)
    assert any("not a piece" in w.value for w in at.warning) and at.session_state["dl_forced"] == {2: token}
    # Reloading the link keeps the forced token.
    again = page(**{k: at.query_params[k] for k in ("text", "step", "forced") if k in at.query_params})
    clean(again)
    assert generated(again)[1] == token


@needs_ckpt
def test_beam_search_shows_the_tree_and_sorted_hypotheses():
    at = page(strategy="beam", beam="3", alpha="0.6", step="999")  # past the end: clamped to the last step
    clean(at)
    assert at.slider(key="dl_w_beam").value == 3
    result = shown(at)[0]
    assert at.session_state["dl_step"] == len(result.steps) and at.query_params["step"] == str(len(result.steps))
    specs = charts(at)
    assert len(specs) == 1
    cands = next(t for t in specs[0]["data"] if t.get("name") == "candidates")
    assert len(cands["x"]) == sum(len(s) for s in result.steps)
    table = at.table[-1].value  # the final ranking: a static table, whose cells wrap (a dataframe cut
    assert all(not str(t).endswith("…") for t in table["translation"])  # the translations off at its width)
    scores = list(table["score"])
    assert scores == sorted(scores, reverse=True) and list(table["rank"]) == list(range(1, len(scores) + 1))
    assert set(table.columns) >= {"translation", "log P", "score", "finished"}
    assert len(scores) == len(result.hypotheses)


@needs_ckpt
def test_beam_search_steps_through_the_tree():
    at = page(strategy="beam", beam="2", alpha="0.6")
    clean(at)
    assert at.session_state["dl_step"] == 0 and "Press **Next**" in at.info[0].value

    def nodes() -> int:
        return len(next(t for t in charts(at)[0]["data"] if t.get("name") == "candidates")["x"])

    assert nodes() == 0
    button(at, "Next").click().run()
    clean(at)
    assert at.session_state["dl_step"] == 1 and at.query_params["step"] == "1" and nodes() == 4
    considered = at.dataframe[0].value
    assert len(considered) == 4 and list(considered["outcome"]).count("pruned") >= 2
    assert list(considered["beam (parent)"]) == ["<bos>"] * 4  # step 1: every candidate extends <bos>
    button(at, "Next").click().run()
    button(at, "Back").click().run()
    clean(at)
    assert at.session_state["dl_step"] == 1 and nodes() == 4
    button(at, "Run to end").click().run()
    clean(at)
    assert at.session_state["dl_step"] == len(shown(at)[0].steps)
    assert "Best hypothesis" in " ".join(m.value for m in at.markdown)
    # A shared link with the step reproduces the same view.
    again = page(strategy="beam", beam="2", alpha="0.6", step="1")
    clean(again)
    assert again.session_state["dl_step"] == 1 and len(again.dataframe[0].value) == 4


@needs_ckpt
def test_garbage_query_params_never_raise():
    at = page(
        temperature="-1",
        top_p="7",
        step="abc",
        forced="zz",
        top_k="99999999",
        seed="x",
        beam="0",
        alpha="nan",
        strategy="sample",
    )
    clean(at)
    noted = " ".join(w.value for w in at.info)
    assert "`temperature`" in noted and "`top_p`" in noted and "`forced`" in noted
    assert at.slider(key="dl_w_temperature").value == 0.05 and at.slider(key="dl_w_top_p").value == 1.0
    assert at.number_input(key="dl_w_top_k").value == TextTokenizer.from_file(CKPT / "tokenizer.json").vocab_size
    assert at.slider(key="dl_w_beam").value == 1 and at.session_state["dl_step"] == 0
    button(at, "Next").click().run()
    clean(at)
    assert at.query_params["temperature"] == "0.05" and "forced" not in at.query_params
    huge = page(step="99999", forced="1:3,2:-5", strategy="greedy")
    clean(huge)
    assert huge.session_state["dl_step"] == len(generated(huge)) >= 1


@needs_ckpt
def test_presentation_mode_draws_every_table_as_html():
    """In presentation mode a table is an HTML table that CSS enlarges, not the canvas data grid."""
    from ui import presentation

    at = st_testing.AppTest.from_string(WRAPPER, default_timeout=TIMEOUT)
    for key, value in {"strategy": "beam", "beam": "2", "step": "1"}.items():
        at.query_params[key] = value
    at.session_state[presentation.KEY] = True
    at.run()
    clean(at)
    assert not at.dataframe and not at.table
    tables = [h.proto.body for h in at.get("html") if "ae-table" in h.proto.body]
    assert len(tables) == 2  # the candidates, the open beams
    assert tables[0].count("&lt;bos&gt;") == 4 and "<bos>" not in tables[0]  # every candidate extends <bos>
