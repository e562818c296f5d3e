"""A visitor's text never reaches the page as markup: every HTML builder that ``unsafe_allow_html`` draws escapes
what it is given (a sentence, a token or piece, a title or caption that quotes them, a table cell).

Each builder is fed the classic payloads in every text argument; the HTML it returns must hold no tag of theirs,
and no blank line, after which Markdown would read the rest of the fragment as Markdown instead of HTML.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from charts.next_token import top_tokens_html
from charts.teaching import cell_html, pieces_html, token_spans_html
from ui.widgets import output_html, table_html
from viz.attention import alignment_html, highlight_tokens_html, tokens_html
from viz.lens import lens_table_html, lens_table_svg

PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '"><svg onload=alert(1)>',
    "a\n\n<img src=x onerror=alert(1)>",
]
#: A tag a payload would open, as it would appear unescaped.
TAG = re.compile(r"<\s*/?\s*(script|img)\b|<svg\s+onload", re.IGNORECASE)


def assert_inert(html: str, what: str, markdown: bool = True) -> None:
    assert not TAG.search(html), f"{what}: an unescaped tag reached the HTML: {html[:300]}"
    if markdown:
        assert not re.search(r"\n[ \t]*\n", html), f"{what}: a blank line ends the HTML block in Markdown"


def lens_args(piece: str) -> dict:
    return dict(
        layer_labels=[piece, "2"],
        top_pieces=[[piece, "b"], ["c", piece]],
        top_probs=[[0.6, 0.4], [0.7, 0.3]],
        chosen_cols=[0, 1],
        chosen_probs=[0.6, 0.3],
        chosen_ranks=[1, 2],
        chosen_piece=piece,
        first_top=0,
        title=piece,
    )


BUILDERS = {
    "top_tokens_html": lambda p: top_tokens_html([p, "b"], [0.7, 0.3], chosen=0, title=p),
    "alignment_html": lambda p: alignment_html(np.full((2, 2), 0.5), [p, "x"], ["y", p], title=p),
    "highlight_tokens_html": lambda p: highlight_tokens_html([p, "b"], [0.9, 0.1], caption=p),
    "highlight_tokens_html (tiny weights)": lambda p: highlight_tokens_html([p], [0.001], caption=p),
    "tokens_html": lambda p: tokens_html([p, "b"], current=0),
    "lens_table_html": lambda p: lens_table_html(**lens_args(p)),
    "lens_table_svg": lambda p: lens_table_svg(**lens_args(p)),
    "token_spans_html": lambda p: token_spans_html(
        p + " " + p, [p, p, "<unk>"], [5, 6, 3], [(0, len(p)), (len(p), len(p)), (len(p) + 1, 2 * len(p) + 1)]
    ),
    "token_spans_html (unknown piece)": lambda p: token_spans_html(p, [p], [3], [(0, len(p))], unk=p),
    "pieces_html": lambda p: pieces_html([p, "b"], [True, False]),
    "cell_html": cell_html,
    "output_html": lambda p: output_html(p, prompt=p, empty=p),
    "output_html (empty)": lambda p: output_html("", empty=p),
    "table_html": lambda p: table_html([{p: p, "n": 1.5}], formats={p: "{}"}),
}
#: Builders whose HTML a page draws with ``st.html``, not through Markdown.
NOT_MARKDOWN = {"table_html"}


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_html_builder_escapes_what_it_is_given(name, payload):
    assert_inert(BUILDERS[name](payload), name, markdown=name not in NOT_MARKDOWN)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_escaped_text_still_reads_as_typed(name):
    """Escaping is not dropping: the text shows as it was typed (as entities in the source)."""
    html = BUILDERS[name]("<b>&")
    assert "&lt;b&gt;&amp;" in html, html[:300]


def test_a_piece_in_the_merge_table_cannot_become_markdown():
    """The Tokenization page's replay is a Markdown table of HTML chips: a piece made of Markdown's punctuation
    must show as itself, not as emphasis, code or a link, and must not end its cell."""
    cell = cell_html("**[x](javascript:alert(1))**|`y`")
    assert not set("*[]()|`") & set(cell), cell


# --- the pages, driven as a visitor's link drives them -----------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
SENTENCE = "The cat <script>alert(1)</script> sat on the <img src=x onerror=alert(1)> mat."
#: (page, link): the shared sentence through ``?text=``, a step taken where the page steps, the Tokenization page's
#: own texts (one with a blank line), and a language model, whose prompt the output box shows too.
VISITS = [
    ("translate", {"text": SENTENCE, "step": "3"}),
    ("translate", {"text": SENTENCE, "step": "2", "ckpt": "brown-lm"}),
    ("attention", {"text": SENTENCE, "tab": "Tokens & lines"}),
    ("decoding", {"text": SENTENCE, "step": "2"}),
    ("tokenization", {"tok_text": SENTENCE + "\n\n" + SENTENCE, "train_text": SENTENCE + "\n" + SENTENCE}),
]


def html_drawn(at) -> list[str]:
    """Every piece of HTML the run draws as HTML: Markdown elements that allow it, and ``st.html``."""
    markdown = [e.proto.body for e in at.get("markdown") if e.proto.allow_html]
    return markdown + [e.proto.body for e in at.get("html")]


@pytest.mark.skipif(
    not (ROOT / "checkpoints" / "en-de" / "model.safetensors").is_file(), reason="checkpoints/en-de is missing"
)
@pytest.mark.parametrize("page, query", VISITS, ids=[f"{p}-{q.get('ckpt', 'en-de')}" for p, q in VISITS])
def test_a_sentence_from_the_link_reaches_no_page_as_markup(page, query, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_CHECKPOINTS", raising=False)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page(f"app_pages/{page}/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    drawn = html_drawn(at)
    assert any("&lt;" in h for h in drawn), "the sentence was not drawn as HTML at all"
    for h in drawn:
        assert_inert(h, page)


@pytest.mark.skipif(
    not (ROOT / "checkpoints" / "en-de" / "model.safetensors").is_file(), reason="checkpoints/en-de is missing"
)
def test_a_run_or_checkpoint_folder_name_reaches_no_page_as_markup(tmp_path, monkeypatch):
    """Folder names are the visitor's too (a run named in the form, a folder someone copied in): the Training
    page's table in presentation mode (HTML, not the data grid) and the sidebar's picker draw them as text."""
    from streamlit.testing.v1 import AppTest

    name = "<img src=x onerror=alert(1)>"
    runs, extra = tmp_path / "runs", tmp_path / "models"
    (runs / name).mkdir(parents=True)
    (runs / name / "status.json").write_text('{"state": "finished", "step": 3}', encoding="utf-8")
    extra.mkdir()
    shutil.copytree(ROOT / "checkpoints" / "brown-lm", extra / name)
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ATTENTION_EXPLORER_RUNS", str(runs))
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(extra))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["present"], at.query_params["ckpt"] = "1", name
    at.switch_page("app_pages/training/training.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    drawn = html_drawn(at)
    assert any("&lt;img" in h for h in drawn), "the run's name was not drawn as HTML at all"
    for h in drawn:
        assert_inert(h, "training")
