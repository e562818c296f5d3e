"""The README is a short front door and the rest lives in ``docs/`` and the model cards beside the weights, so the
links between them carry the reader: every relative link and image of ``README.md``, ``docs/*.md``,
``checkpoints/*/README.md`` and ``checkpoints/*/HISTORY.md`` must point at a file that exists, and a ``#anchor``
into a Markdown file at one of its headings, slugged as GitHub slugs them. External links are not followed (no
network). A model card stays a card (what the shipped model is); how a lineage got there goes to the
``HISTORY.md`` beside it, which the card links."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
#: Our model cards: a Hugging Face folder downloaded into checkpoints/ (docs/hugging-face.md) has a README.md of its
#: authors, with no card.json beside it, whose links are theirs.
CARDS = sorted(p for p in (ROOT / "checkpoints").glob("*/README.md") if (p.parent / "card.json").is_file())
#: The training history beside a card: every leg, A/B table and decision of the models before the shipped one.
HISTORIES = [p.parent / "HISTORY.md" for p in CARDS if (p.parent / "HISTORY.md").is_file()]
PAGES = [README, *DOCS, *CARDS, *HISTORIES]
README_MAX_LINES = 150
#: As long as a Hugging Face model card: the shipped model's description, data, recipe, scores and limits.
CARD_MAX_LINES = 150

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# [text](target) and ![alt](target), the target optionally in <…> and followed by a "title"; the text may hold one
# level of brackets and line breaks.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, …


def prose(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks (a ``#`` in a shell block is no heading)."""
    lines, fence = [], None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, punctuation dropped (letters, digits, ``_``,
    ``-`` and spaces stay), spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or image reads as its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; a repeated heading gets ``-1``, ``-2``, … as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    """The targets of every link and image in a Markdown file, outside code blocks and code spans."""
    text = "\n".join(prose(path.read_text(encoding="utf-8")))
    text = _CODE_SPAN.sub(lambda m: "code", text)
    return [m.group(1) for m in _LINK.finditer(text)]


def resolve(page: Path, target: str) -> tuple[Path, str]:
    """``(file, anchor)`` of a relative link on ``page`` (the file is ``page`` itself for ``#anchor``)."""
    file_part, _, anchor = target.partition("#")
    file = (page.parent / unquote(file_part)).resolve() if file_part else page
    return file, unquote(anchor)


def test_slugs_as_github_makes_them():
    assert slug("Leg 5: the warm A/B and the soup") == "leg-5-the-warm-ab-and-the-soup"
    assert slug("en-de: the shipped English → German translator") == "en-de-the-shipped-english--german-translator"
    assert slug("The `--impl torch` baseline") == "the---impl-torch-baseline"
    assert slug("Brown: English sentences (the language model)") == "brown-english-sentences-the-language-model"


def test_the_parser_skips_code_and_reads_every_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n```bash\n# not a heading [x](nowhere.md)\n```\n\n`[y](nowhere.md)` and\n"
        '[a\nlink](other.md#part) ![img](pic.png "title") [web](https://example.org)\n\n## Title\n',
        encoding="utf-8",
    )
    assert links(page) == ["other.md#part", "pic.png", "https://example.org"]
    assert anchors(page) == {"title", "title-1"}


def test_every_page_exists():
    assert README.is_file()
    assert {p.parent.name for p in CARDS} >= {"en-de", "brown-lm"}, "each shipped model has its card"
    assert DOCS, "docs/ holds the pages the README links to"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        if _EXTERNAL.match(target):
            continue
        file, anchor = resolve(page, target)
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move detail into docs/ (at most {README_MAX_LINES})"


@pytest.mark.parametrize("card", CARDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_model_card_is_a_card(card):
    lines = card.read_text(encoding="utf-8").count("\n")
    assert lines <= CARD_MAX_LINES, (
        f"{card.relative_to(ROOT)} has {lines} lines: a card describes the shipped model "
        f"(at most {CARD_MAX_LINES}); move its training history into HISTORY.md beside it"
    )


def test_the_translator_keeps_its_history_beside_its_card():
    card = ROOT / "checkpoints" / "en-de" / "README.md"
    history = card.parent / "HISTORY.md"
    assert history in HISTORIES, "checkpoints/en-de/HISTORY.md holds the lineages before the shipped model"
    assert history.resolve() in {resolve(card, t)[0] for t in links(card)}, "the card links its history"
    assert card.resolve() in {resolve(history, t)[0] for t in links(history)}, "the history links back to the card"


def test_readme_links_every_page_and_model_card():
    targets = {resolve(README, t)[0] for t in links(README) if not _EXTERNAL.match(t)}
    missing = [p.relative_to(ROOT) for p in [*DOCS, *CARDS, *HISTORIES] if p.resolve() not in targets]
    assert not missing, f"README.md does not link to {', '.join(map(str, missing))}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_tracker_numbers(page):
    """A reader of the docs has no tracker: say why, not which issue asked."""
    hits = re.findall(r"\bissues?[ -]?#?\d+", page.read_text(encoding="utf-8"), re.IGNORECASE)
    assert not hits, f"{page.relative_to(ROOT)} cites {hits}"
