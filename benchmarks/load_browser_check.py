"""The load benchmark's browser check (``python -m benchmarks.load --browser-check``): at the peak level, one real
Chromium steps a sentence on Translate and what it shows (the step, the output, the generated pieces) is compared
with a greedy decoding computed here with the page's own code, so that a server that answers every simulated
visitor in time but draws the wrong thing does not pass.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote_plus

from benchmarks.app_server import chromium, open_page, settled
from benchmarks.page_view import STEP_RE

BROWSER_TEXT, BROWSER_CLICKS = "The cat sat on the mat.", 3
#: In the browser: the pieces of "Generated so far" (the chips of the markdown block after that heading).
CHIPS_JS = """() => { const els = [...document.querySelectorAll('[data-testid="stMarkdownContainer"]')];
  const i = els.findIndex(e => e.innerText.trim().startsWith('Generated so far'));
  return i < 0 || !els[i + 1] ? null : [...els[i + 1].querySelectorAll('span')].map(s => s.innerText); }"""


def browser_check(app_dir: Path):
    """A check for the peak level: returns ``check(url) -> dict`` in which one Chromium opens Translate on
    :data:`BROWSER_TEXT`, clicks Next :data:`BROWSER_CLICKS` times and compares the step, the output and the
    generated pieces it shows with a greedy decoding computed here, now, with the page's own code
    (:func:`ui.state.new_stepper`, as ``tests/test_many_visitors.py`` does) on ``app_dir``'s default checkpoint."""
    from decoding.stepping import input_limit, prepare_source
    from model.checkpoint import load_checkpoint
    from ui.checkpoints import DEFAULT_CHECKPOINT
    from ui.pieces import of_ids
    from ui.state import new_stepper
    from viz.token_labels import display_token

    ckpt = load_checkpoint(app_dir / "checkpoints" / DEFAULT_CHECKPOINT)
    cfg, tok = ckpt.config, ckpt.tokenizer
    src = prepare_source(tok, BROWSER_TEXT, input_limit(cfg), cfg.eos_id, cfg.unk_id)
    run = new_stepper(ckpt.model, list(src.ids))
    run.run_to_end()
    generated = [r.token_id for r in run.records[:BROWSER_CLICKS]]
    expected = {
        "step": [BROWSER_CLICKS, len(run.records)],
        "output": tok.decode(run.output_ids()),
        "tokens": [display_token(p) for p in of_ids(tok, generated)],
    }

    def check(url: str) -> dict:
        t0 = time.perf_counter()
        try:
            with chromium() as browser:
                page = open_page(browser, (1280, 720), timeout_ms=int(300_000))
                page.goto(f"{url}/?text={quote_plus(BROWSER_TEXT)}")
                settled(page, r"Step 0 of \d+", timeout_ms=300_000)
                for k in range(1, BROWSER_CLICKS + 1):
                    page.get_by_role("button", name="Next").click()
                    settled(page, rf"Step {k} of \d+", min_ms=100, timeout_ms=300_000)
                m = STEP_RE.search(page.inner_text("body"))
                shown = {
                    "step": [int(m[1]), int(m[2])] if m else None,
                    "output": page.locator(".ae-output").first.inner_text().strip(),
                    "tokens": page.evaluate(CHIPS_JS),
                }
        except Exception as exc:  # Playwright's errors, a missing Chromium: the check failed, the run goes on
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        return {
            "ok": shown == expected,
            "seconds": round(time.perf_counter() - t0, 2),
            "shown": shown,
            "expected": expected,
        }

    return check
