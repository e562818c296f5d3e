"""What the app-level AppTest modules (``test_app*.py``) share: the app's paths, the shipped translator's config
and card, a fresh app session, and readers of what a page drew.

Importing it skips the importing module when Streamlit or the shipped ``checkpoints/en-de`` is missing.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"
DEFAULT_CKPT = ROOT / "checkpoints" / "en-de"
TIMEOUT = 60
#: Where the page scripts live (``app_pages/``; see test_no_legacy_pages_folder for why not ``pages/``).
PAGES = "app_pages" if (ROOT / "app_pages").is_dir() else "pages"
ATTENTION_PAGE, TRANSLATE_PAGE = f"{PAGES}/attention/attention.py", f"{PAGES}/translate/translate.py"

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

if not (DEFAULT_CKPT / "model.safetensors").is_file():  # pragma: no cover - a clone without the model
    pytest.skip("checkpoints/en-de is missing", allow_module_level=True)

from model.config import ModelConfig

CFG = ModelConfig.from_json(DEFAULT_CKPT / "config.json")
#: The shipped translator's card: it may name the layer the pages open on (``open_layer``).
CARD = json.loads((DEFAULT_CKPT / "card.json").read_text(encoding="utf-8"))
STEP_RE = re.compile(r"\*\*Step (\d+) of (\d+)\*\*")


def make_app(**query: str) -> AppTest:
    """A fresh app session, started with ``query`` as URL query parameters, after its first run."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def assert_clean(at: AppTest) -> None:
    """No exception element and no ``st.error`` anywhere."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def button(at: AppTest, label_start: str):
    found = [b for b in at.button if b.label.startswith(label_start)]
    assert len(found) == 1, [b.label for b in at.button]
    return found[0]


def step_line(at: AppTest) -> tuple[int, int]:
    """``(step, total)`` from the "**Step N of M**" line."""
    for md in at.markdown:
        m = STEP_RE.search(md.value)
        if m:
            return int(m.group(1)), int(m.group(2))
    raise AssertionError("no 'Step N of M' line")


def n_charts(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


def chart_titles(at: AppTest) -> list[str]:
    """The charts' titles as one line each (a title too long for its chart is wrapped with ``<br>``)."""
    return [
        json.loads(c.proto.spec)["layout"]["title"]["text"].replace("<br>", " ").replace("  ", " ")
        for c in at.get("plotly_chart")
    ]


def alignments(at: AppTest) -> list[str]:
    """The HTML alignment maps (:func:`viz.attention.alignment_html`) in the page."""
    return [md.value for md in at.markdown if 'class="ae-align"' in md.value]


def n_alignments(at: AppTest) -> int:
    return len(alignments(at))


def alignment_z(at: AppTest) -> np.ndarray:
    """The weights of the one alignment map: ``[generated, source]`` from its cells' ``data-w``."""
    (page_html,) = alignments(at)
    body = page_html.split("<tbody>")[1].split("</tbody>")[0]
    return np.array([[float(w) for w in re.findall(r'data-w="([^"]+)"', row)] for row in body.split("</tr>")[:-1]])


def heat_z(at: AppTest, index: int) -> np.ndarray:
    """The ``z`` matrix of the ``index``-th Plotly chart (plotly ships numpy arrays base64-encoded)."""
    z = json.loads(at.get("plotly_chart")[index].proto.spec)["data"][0]["z"]
    if isinstance(z, dict):
        shape = tuple(int(n) for n in z["shape"].split(","))
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"])).reshape(shape)
    return np.array(z, dtype=float)


def chip_markdown(at: AppTest) -> list[str]:
    """Every markdown block and caption of the page body (step line, token chips, shaded source…)."""
    return [md.value for md in at.main.markdown] + [c.value for c in at.main.caption]


def messages(at: AppTest) -> str:
    return " ".join(m.value for m in [*at.warning, *at.info, *at.error])
