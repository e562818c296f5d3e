"""The Decoding lab as a new user reads it at 1280×720: the first panel named for what it plots (log-probabilities),
a short bar's value readable, a wide beam's newest labels apart, tables in one number format with whole tokens,
a decoder-only model that speaks of no cross-attention and suggests its own kind of token, probability bars as long
as their probabilities, and an output box that says what will happen before the first step.

Figure- and table-level checks (fast), then ``AppTest`` runs of ``app_pages/decoding/decoding.py`` with the shipped
checkpoints. Nothing asserts particular words: the models may be replaced.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
import torch

from app_pages.decoding import lab
from app_pages.decoding.views import DECIMALS, table_parts
from charts.beam import BEAM_PLOT_PX, beam_tree_figure
from charts.next_token import pipeline_figure, top_tokens_html
from decoding.sampling import SamplingConfig, choose_next
from ui.widgets import BEFORE_FIRST_STEP, output_html
from viz.theme import DARK_TEXT, WHITE

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "app_pages" / "decoding" / "decoding.py"
EN_DE = ROOT / "checkpoints" / "en-de"
BROWN = ROOT / "checkpoints" / "brown-lm"
TIMEOUT = 90


def _piece(i: int) -> str:
    return f"▁t{i}"


def _log_prob_pipeline(top: float = -0.05, vocab: int = 40):
    """A greedy choice over log-probabilities whose chosen token is very likely (a short bar) and the rest spread
    from −3 to −9 (long bars)."""
    log_p = torch.linspace(-3.0, -9.0, vocab)
    log_p[7] = top
    return choose_next(log_p, SamplingConfig("greedy"))


# --- the pipeline figure ----------------------------------------------------------------------------------------
def test_the_first_panel_is_titled_for_the_log_probabilities_it_plots():
    """The panel titled "logits" plotted log-probabilities (the stepper hands the rule log-softmax values)."""
    fig = pipeline_figure(_log_prob_pipeline(), _piece, temperature=0.7)
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("log p") and "logits" not in titles[0].replace("log-softmax", "")
    assert titles[1].startswith("log p ÷ T") and "T = 0.7" in titles[1]
    assert all(v <= 0 for v in fig.data[0].x)  # what it plots: log-probabilities
    raw = pipeline_figure(choose_next(torch.linspace(5, -5, 40), SamplingConfig("greedy")), _piece, scores="logits")
    assert raw.layout.annotations[0].text.startswith("logits")


def test_a_short_bar_carries_its_value_outside_where_it_can_be_read():
    """The chosen token's log p (−0.05) was written inside its bar, a few pixels long, and Plotly shrank it to
    nothing; long bars keep their value inside, in white."""
    pipe = _log_prob_pipeline()
    fig = pipeline_figure(pipe, _piece, top=15)
    chosen = fig.layout.meta["chosen"]
    for trace in fig.data[:2]:
        places, colours = list(trace.textposition), list(trace.textfont.color)
        assert places[chosen] == "outside" and colours[chosen] == DARK_TEXT
        longest = max(range(len(trace.x)), key=lambda r: abs(trace.x[r]))
        assert places[longest] == "inside" and colours[longest] == WHITE


# --- the beam tree ----------------------------------------------------------------------------------------------
def test_a_wide_beams_newest_labels_stand_apart_from_its_scores():
    """At beam width 8 the newest step's two-line labels (token over score, under each of 16 nodes) stacked onto
    the next rank's: each is one line now, right of its node, with room left on the axis for it."""
    width, steps_so_far, total = 8, 4, 15
    steps = [
        [(j % width, 100 + 16 * t + j, -0.4 * t - 0.3 * j - 10.0, j < width) for j in range(2 * width)]
        for t in range(steps_so_far)
    ]
    result = SimpleNamespace(steps=steps, hypotheses=[SimpleNamespace(tokens=[100 + 16 * t for t in range(4)])])
    fig = beam_tree_figure(result, lambda i: f"▁werde{i}", eos_id=2, n_steps=total, ranks=2 * width)
    nodes = next(t for t in fig.data if t.name == "candidates")
    newest = [
        (text, place)
        for text, place, x in zip(nodes.text, nodes.textposition, nodes.x, strict=True)
        if x == steps_so_far
    ]
    assert len(newest) == 2 * width
    for text, place in newest:
        assert "<br>" not in text and place == "middle right"
        assert re.search(r"\S\u00a0{3}-\d+\.\d\d$", text)  # the token, a gap, then its score, on one line
    # one line per rank fits between neighbouring ranks
    rank_px = (fig.layout.height - fig.layout.margin.t - fig.layout.margin.b) / (2 * width)
    assert rank_px >= 1.3 * nodes.textfont.size
    # the labels of the last step of the search still fit right of it
    lo, hi = fig.layout.xaxis.range
    step_px = BEAM_PLOT_PX / (hi - lo)
    longest = max(len(t) for t, _ in newest) * 0.6 * nodes.textfont.size
    assert (hi - total) * step_px >= longest
    assert list(fig.layout.xaxis.tickvals) == list(range(total + 1))  # the whole search's axis: it grows in place


# --- tables -----------------------------------------------------------------------------------------------------
def test_tables_use_one_number_format_yes_no_and_whole_tokens():
    """Tables mixed 0.761 / 0.59 / 0.2271 / "true" and cut "▁werde" to "▁wer…" in a narrow column."""
    rows = [
        {
            "step": 1,
            "token": "▁werde",
            "p": 0.761,
            "p (after the rule)": 0.59,
            "log P": -0.2271,
            "finished": True,
            "forced": "★",
        },
        {
            "step": 2,
            "token": "▁Hausaufgaben",
            "p": 1.0,
            "p (after the rule)": 0.2,
            "log P": -12.5,
            "finished": False,
            "forced": "",
        },
    ]
    frame, formats, widths = table_parts(rows)
    shown = {c: [formats[c].format(v) if c in formats else str(v) for v in frame[c]] for c in frame.columns}
    assert shown["p"] == ["0.761", "1.000"] and shown["p (after the rule)"] == ["0.590", "0.200"]
    assert shown["log P"] == ["-0.227", "-12.500"]
    assert shown["finished"] == ["yes", "no"] and shown["step"] == ["1", "2"] and shown["forced"] == ["★", ""]
    assert widths["token"] >= len("▁Hausaufgaben") * 8


# --- the page, with AppTest -------------------------------------------------------------------------------------
st_testing = pytest.importorskip("streamlit.testing.v1")


def page(ckpt: Path, **query: str):
    if not (ckpt / "model.safetensors").is_file():
        pytest.skip(f"{ckpt.name} is missing")
    wrapper = (
        f"import pathlib, runpy\nimport streamlit as st\n"
        f"st.session_state['app_ckpt_path'] = pathlib.Path({str(ckpt)!r})\n"
        f"runpy.run_path({str(PAGE)!r}, run_name='__main__')\n"
    )
    at = st_testing.AppTest.from_string(wrapper, default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown_table(element) -> dict[str, list[str]]:
    """What a table on the page shows, cell by cell (the Styler's display strings when it has them)."""
    arrow = element.proto.arrow_data
    data = arrow.styler.display_values if arrow.styler.display_values else arrow.data
    frame = pa.ipc.open_stream(data).read_all().to_pandas()
    return {c: [str(v) for v in frame[c]] for c in frame.columns}


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)


def test_the_page_titles_its_chart_and_formats_its_tables():
    at = page(EN_DE, step="3")
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert "log-probabilities" in spec["layout"]["title"]["text"]
    assert spec["layout"]["annotations"][0]["text"].startswith("log p")
    (probs,) = [d for d in at.dataframe if "p (model)" in d.value.columns]
    cells = shown_table(probs)
    number = re.compile(rf"^-?\d+\.\d{{{DECIMALS}}}$")
    for column in ("p (model)", "p (after the rule)", "cumulative log p"):
        assert all(number.match(v) for v in cells[column]), (column, cells[column])
    config = json.loads(probs.proto.columns)
    longest = max(len(t) for t in cells["token"])
    assert config["token"]["width"] >= longest * 8


def test_beam_tables_say_yes_or_no_and_keep_three_decimals():
    at = page(EN_DE, strategy="beam", beam="2", step="2")
    (hyps,) = [t for t in at.table if "finished" in t.value.columns]
    cells = shown_table(hyps)
    assert set(cells["finished"]) <= {"yes", "no"}
    assert all(re.match(r"^-?\d+\.\d{3}$", v) for c in ("log P", "lp", "score") for v in cells[c])
    (cands,) = [d for d in at.dataframe if "cumulative log P" in d.value.columns]
    assert all(re.match(r"^-?\d+\.\d{3}$", v) for v in shown_table(cands)["cumulative log P"])


def test_a_decoder_only_model_has_no_cross_attention_tab_and_suggests_its_own_tokens():
    """With brown-lm the tab still said "cross-attention" and the force box suggested "▁Haus"."""
    at = page(BROWN, step="1")
    assert [t.label for t in at.tabs] == ["Probabilities", "KV cache", "Logit lens", "Attention vs attribution"]
    assert not any("cross-attention" in t.label.lower() for t in at.tabs)
    box = at.text_input(key="dl_force_text")
    example = box.placeholder.removeprefix("e.g. ")
    assert example != "▁Haus"
    from model.checkpoint import load_checkpoint

    tok = load_checkpoint(BROWN).tokenizer
    from tests.test_decoding_page import shown

    record = shown(at, BROWN).records[at.session_state["dl_step"] - 1]
    ids, _ = record.top(15)
    assert tok.token_to_id(example) in ids  # one of this step's candidates, from the model's own vocabulary
    assert example.startswith("▁")


def test_the_example_piece_comes_from_the_candidates():
    class Tok:
        vocab = ["<pad>", "<bos>", "<eos>", "ing", "▁the", "▁Haus", ",", "▁a", "▁and"]
        vocab_size = len(vocab)
        word_start = "▁"
        display = staticmethod(str)

        def id_to_token(self, i):
            return self.vocab[i]

    # a word start (two letters at least) other than the token taken
    assert lab.example_piece(Tok(), [4, 3, 7, 8], avoid=4) == "▁and"
    assert lab.example_piece(Tok(), [3, 6], avoid=3) == ","  # no word start among them: another candidate
    assert lab.example_piece(Tok(), [], avoid=None) == "▁the"  # nothing to go on: the vocabulary's first word start


# --- probabilities drawn as probabilities -----------------------------------------------------------------------
def test_a_probability_bar_shows_its_probability_not_its_share_of_the_top():
    """The top-10 bars were scaled to the first: a 2.8 % first choice drew as long as a 92.8 % one."""
    unsure = top_tokens_html(["▁a", "▁b"], [0.028, 0.014], chosen=0)
    sure = top_tokens_html(["▁a", "▁b"], [0.928, 0.014], chosen=0)
    widths = [re.findall(r"width:([\d.]+)%", h) for h in (unsure, sure)]
    assert [float(w) for w in widths[0]] == [2.8, 1.4] and [float(w) for w in widths[1]] == [92.8, 1.4]


def test_the_softmax_panels_run_from_0_to_100_percent():
    """The lab's softmax panel ran 0–53 % when the top token had 38 %: its bars looked nearly certain."""
    pipe = choose_next(
        torch.linspace(0.0, -3.0, 40),
        SamplingConfig("sample", temperature=1.0, top_k=5),
        torch.Generator().manual_seed(0),
    )
    fig = pipeline_figure(pipe, _piece, temperature=1.0)
    for axis in (fig.layout.xaxis3, fig.layout.xaxis4):
        assert axis.range[0] == 0 and 1.0 <= axis.range[1] <= 1.2
        assert list(axis.ticktext) == ["0", "50%", "100%"]
    probs = fig.data[2]
    assert max(probs.x) < 0.5  # no token is above 50 % here, and no bar reaches the middle of its panel


def test_the_beam_view_says_what_will_happen_before_the_first_step():
    """Before the first step the output box read "(empty output)", as if the model had produced nothing."""
    at = page(EN_DE, strategy="beam", beam="2", step="0")
    boxes = [m.value for m in at.markdown if "ae-output" in m.value]
    assert boxes and "(empty output)" not in boxes[0] and BEFORE_FIRST_STEP in boxes[0]
    assert "Press Next" in BEFORE_FIRST_STEP or "press Next" in BEFORE_FIRST_STEP
    assert "(empty output)" in output_html("") and "ae-output" in output_html("", empty=BEFORE_FIRST_STEP)


def test_a_banned_or_cut_punctuation_piece_reads_as_itself_and_values_stand_off_the_names():
    """A line through "." or ":" read as "÷": a piece of punctuation alone is marked with a cross, a piece with
    letters is still struck through; and the token names stand apart from the values written in the bars."""
    from charts.next_token import LABEL_STANDOFF, NOT_KEPT_MARK

    names = {0: ".", 1: "▁im", 2: ":", 3: "▁Haus", 4: "-"}
    log_p = torch.linspace(-0.5, -9.0, 40)
    pipe = choose_next(log_p, SamplingConfig("sample", top_k=1))  # only the first is kept: the rest are cut
    fig = pipeline_figure(pipe, lambda i: names.get(i, f"▁t{i}"), top=5, banned=[4])
    labels = list(fig.layout.yaxis.ticktext)
    assert labels[0] == "1. <b>.</b>"  # kept and chosen
    assert labels[1] == "2. <s>▁im</s>" and labels[3] == "4. <s>▁Haus</s>"
    assert labels[2] == f"3. : {NOT_KEPT_MARK}" and labels[4] == f"5. - {NOT_KEPT_MARK}"
    assert fig.layout.yaxis.ticklabelstandoff == LABEL_STANDOFF >= 8
