"""Redo the screenshots in ``docs/screenshots/``: ``python -m benchmarks.screenshots [--out DIR] [--only a,b]``.

Run it whenever the shipped model (``checkpoints/``) or a page's look changes: the README and
``docs/presentation-mode.md`` show these pictures, and their translations, numbers and layout come from the model
and the pages. It serves the app as ``make run`` does (:mod:`benchmarks.app_server`), opens every page in
presentation mode (``?present=1``) at 1280×720 and at 1920×1080 in Debian's Chromium, waits until the page's main
content is drawn and its script run is over, and saves what the screen shows (the viewport, not the whole page)
as ``<page>-<width>x<height>.png``. Translate, Attention and the Decoding lab show the lecture preset "My brother
lives in Berlin." (Translate and the lab at step 3); the other pages show their defaults, and ``lecture-live`` the
Worked examples' live numbers of the sentence scrolled to Q, K and V, and ``translate-lens`` Translate's logit lens at
step 3, scrolled to its toggle (``translate-attribution``: its attention-vs-attribution view); ``translate-far`` a news
sentence at step 3 under the warning that it is far from what the model has seen; ``translate-loop`` the language
model's greedy loop on "Bobby likes" and the note on it. The Training page shows the runs under ``runs/`` as they
are at that moment.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import NamedTuple

from benchmarks.app_server import CHROMIUM, ROOT, ServerError, chromium, open_page, serve, settled

SENTENCE = "text=My+brother+lives+in+Berlin."
VIEWPORTS = ((1280, 720), (1920, 1080))


class Shot(NamedTuple):
    name: str  #: the file name's first part
    query: str  #: the page's path and link parameters, less ``present=1``
    ready: tuple[str, ...]  #: Playwright selectors of the main content: each must be visible before the shot
    pattern: str | None = None  #: a regular expression the page's text must match (the step shown)
    scroll: str | None = None  #: a selector scrolled to the top of the screen before the shot (None: the page's top)


SHOTS = (
    Shot("translate", f"?{SENTENCE}&step=3", ('.ae-align:has-text("Alignment so far")', ".ae-topk"), r"Step 3 of \d+"),
    # a news sentence: the warning that it is far from what the model has seen, above a translation that shows it
    Shot(
        "translate-far",
        "?text=The+European+Central+Bank+raised+interest+rates+again+on+Thursday.&step=3",
        ('[data-testid="stAlert"]:has-text("Far from what")', ".ae-topk"),
        r"Step 3 of \d+",
    ),
    # the language model's greedy loop ("to be able to be able …") and the note under the step that says why
    Shot(
        "translate-loop",
        "?ckpt=brown-lm&text=Bobby+likes&step=12",
        ('[data-testid="stAlert"]:has-text("goes round in a loop")', ".ae-topk"),
        r"Step 12 of \d+",
        scroll=".ae-topk",
    ),
    Shot(
        "translate-lens",
        f"?{SENTENCE}&step=3&lens=1",
        (".ae-lens", ".ae-topk"),
        r"Step 3 of \d+",
        scroll=".st-key-tr_lens",
    ),
    # attention beside attribution at the same step, scrolled to its grid
    Shot(
        "translate-attribution",
        f"?{SENTENCE}&step=3&attr=1",
        (".ae-attr", ".ae-topk"),
        r"Step 3 of \d+",
        scroll=".st-key-tr_attr",
    ),
    # short texts: a chart title that wraps loses the space at the break ("layer 3 ·head 1")
    Shot("attention", f"attention?{SENTENCE}", ('[data-testid="stPlotlyChart"]:has-text("head 1")',)),
    # inside one head: why "Bruder" (about to write "lebt") looks at "lives", with the model's own numbers
    Shot(
        "attention-qk",
        f"attention?{SENTENCE}&kind=cross&head=1&query=2&tab=Query+%C2%B7+key",
        ('[data-testid="stPlotlyChart"]:has-text("scores every key")',),
        scroll=".st-key-at_token_query",
    ),
    Shot(
        "decoding",
        f"decoding?{SENTENCE}&step=3",
        ('[data-testid="stPlotlyChart"]:has-text("to the next token")',),
        r"Step 3",
    ),
    Shot("positional", "positional", ('[data-testid="stPlotlyChart"]:has-text("PE [")',)),
    Shot("tokenization", "tokenization", (r"h3 >> text=/^\d+ pieces$/",)),
    Shot("lecture", "lecture", ('[data-testid="stPlotlyChart"]:has-text("Scores")',)),
    Shot(
        "lecture-live",
        f"lecture?numbers=live&{SENTENCE}",
        ('[data-testid="stPlotlyChart"]:has-text("Scores")',),
        scroll='[data-testid="stPlotlyChart"]:has-text("Q = XW")',
    ),
    # the runs table, or the note that there are no runs
    Shot(
        "training", "training", ('h3:has-text("Runs")', 'table, [data-testid="stDataFrame"], [data-testid="stAlert"]')
    ),
)
NAMES = tuple(s.name for s in SHOTS)
#: True once every Plotly chart that starts on the screen has drawn its SVG: Plotly draws after the script run,
#: and a chart loaded late (its JavaScript comes on first use) would be an empty box in the picture.
CHARTS_DRAWN_JS = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
    .filter(c => c.getBoundingClientRect().top < window.innerHeight)
    .every(c => c.querySelector('.main-svg'))"""
SETTLE_MS = 700  # after all the checks: fonts, Plotly's resize to the column and the last layout pass


def file_name(shot: Shot, viewport: tuple[int, int]) -> str:
    return f"{shot.name}-{viewport[0]}x{viewport[1]}.png"


def take(browser, url: str, shot: Shot, viewport: tuple[int, int], out: Path) -> Path:
    """One page at one viewport, in a fresh browser session (presentation mode belongs to a session)."""
    page = open_page(browser, viewport, timeout_ms=30_000)  # Playwright's own default: the waits below set theirs
    try:
        page.goto(f"{url}/{shot.query}{'&' if '?' in shot.query else '?'}present=1")
        for selector in shot.ready:
            page.locator(selector).first.wait_for(state="visible", timeout=120_000)
        settled(page, shot.pattern, min_ms=300)
        if shot.scroll:  # Streamlit scrolls its main container, which scrollIntoView moves; below its header bar
            page.locator(shot.scroll).first.evaluate(
                "e => { e.style.scrollMarginTop = '70px'; e.scrollIntoView({block: 'start'}); }"
            )
        page.wait_for_function(CHARTS_DRAWN_JS, timeout=60_000)
        page.wait_for_timeout(SETTLE_MS)
        # the Training page reruns its live parts every few seconds: take the picture between two of them
        settled(page, shot.pattern)
        path = out / file_name(shot, viewport)
        page.screenshot(path=str(path))
        if page.locator('[data-testid="stException"]').count():
            print(f"warning: {path.name} shows a Python exception", file=sys.stderr)
        return path
    finally:
        page.context.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.screenshots", description=__doc__.split("\n")[0])
    p.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "screenshots",
        help="folder for the PNG files (default: docs/screenshots)",
    )
    p.add_argument(
        "--only",
        type=lambda s: [n.strip() for n in s.split(",") if n.strip()],
        default=list(NAMES),
        help=f"comma-separated pages, of: {','.join(NAMES)} (default: all)",
    )
    args = p.parse_args(argv)
    unknown = [n for n in args.only if n not in NAMES]
    if unknown or not args.only:
        p.error(f"--only: unknown page(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(NAMES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not Path(CHROMIUM).is_file():
        print(f"error: Chromium not found at {CHROMIUM} (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import Error as PlaywrightError
    except ImportError:
        print("error: the playwright package is missing (make setup-dev)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    shots = [s for s in SHOTS if s.name in args.only]
    t0, current = time.perf_counter(), "Chromium"
    try:
        with chromium() as browser, serve(ROOT / "test-artifacts" / "screenshots-server.log") as url:
            for shot in shots:
                for viewport in VIEWPORTS:
                    current = file_name(shot, viewport)
                    print(take(browser, url, shot, viewport, args.out), flush=True)
    except ServerError as exc:
        print(f"error: the app did not start: {exc}", file=sys.stderr)
        return 2
    except PlaywrightError as exc:  # Chromium would not start, or a page was never drawn
        print(f"error: {current}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"{2 * len(shots)} screenshots in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
