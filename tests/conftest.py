"""Shared fixtures for the model-core unit tests: a tiny BPE tokenizer and tiny Transformer factories.

Everything is seeded and small (d_model 32, 4 heads, 2+2 layers). Torch runs one thread: the models are too small
to gain from more, and the tests must not starve other work on the machine.
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

# The environment first, before anything of the project is imported: modules read these at import.
# Every figure a test builds is validated by Plotly (viz.theme.figure skips it in the served app, for speed), so a
# misspelt property fails a test instead of being drawn as nothing.
os.environ.setdefault("ATTENTION_EXPLORER_VALIDATE_FIGURES", "1")
# No test reads the developer's runs/ (a run there, or a dead one still "running", changed what the Training page and
# the picker showed): each test process, and every app it serves, sees an empty runs folder unless a test sets one.
if "ATTENTION_EXPLORER_RUNS" not in os.environ:
    os.environ["ATTENTION_EXPLORER_RUNS"] = tempfile.mkdtemp(prefix="attention-explorer-test-runs-")
    # removed when this test process ends, so a suite leaves no folder behind in /tmp
    atexit.register(shutil.rmtree, os.environ["ATTENTION_EXPLORER_RUNS"], ignore_errors=True)

# One thread in every process a test starts (a launched trainer, an app, torchrun's ranks; --threads 0 reads it): two
# threads each on two shared cores spun against each other, a 12-step run took 40 s in the suite instead of 6 s.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The app trades compute for memory in glibc (serving.memory.ALLOCATOR: torch 20-45 % slower); no test measures
# memory: test processes keep glibc's defaults, the apps they start map blocks from 4 MiB on.
os.environ.update({"MALLOC_MMAP_THRESHOLD_": str(4 << 20), "MALLOC_TRIM_THRESHOLD_": str(128 << 10)} | os.environ)
# Prefetch reads the next steps' attribution in the background, which only a visitor's wait gains from: in the test
# processes and the apps they serve it kept a core busy after each test that opened the view. The tests of prefetch
# give themselves a prefetcher (set before any project module is imported, so serving.prefetch reads PREFETCH off).
os.environ.setdefault("ATTENTION_EXPLORER_PREFETCH", "0")

# The browser tests drive Debian's headless build of the same Chromium when it is installed (package
# chromium-headless-shell, which make test installs beside chromium; it is the build Playwright itself runs for
# headless pages): the same Blink, V8 and fonts without the browser's own shell, for ~25 % fewer CPU-seconds a page
# (15 against 19-25 s for four pages, one run on this 2-core machine), and Chromium was the suite's largest cost. The
# benchmarks and the screenshots run by hand keep the full browser (benchmarks.app_server.CHROMIUM).
if "CHROMIUM" not in os.environ and os.path.isfile("/usr/bin/chromium-headless-shell"):
    os.environ["CHROMIUM"] = "/usr/bin/chromium-headless-shell"

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hf_fixtures import write_tiny_gpt2_model, write_tiny_marian_model

from model.config import ModelConfig
from model.hf.loader import load_hf_model
from model.tokenizer import TextTokenizer
from model.transformer import Transformer

torch.set_num_threads(1)  # this process too (OMP_NUM_THREADS above covers the ones it starts)


def scan_installed_components_once() -> None:
    """Make Streamlit's scan of the installed packages for components once per test process.

    Every new ``AppTest`` reads the metadata of every installed distribution, looking for Streamlit components
    (``streamlit.components.v2.manifest_scanner``): 0.2 s of CPU, most of a small page's run, and the suite makes
    hundreds of them (~850 AppTest runs). What is installed does not change while the suite runs. A served app
    scans once, at start. tests/test_library_internals.py checks that this still reaches the scan Streamlit makes.
    """
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # a Streamlit without it: each AppTest scans, as it did
        return
    if getattr(manifest_scanner.scan_component_manifests, "scanned_once", False):
        return
    scan = manifest_scanner.scan_component_manifests
    found: list[list] = []

    def scan_component_manifests(max_workers: int | None = None) -> list:
        if not found:
            found.append(scan(max_workers))
        return list(found[0])

    scan_component_manifests.scanned_once = True  # type: ignore[attr-defined]
    manifest_scanner.scan_component_manifests = scan_component_manifests


scan_installed_components_once()

#: Short EN/DE pairs (umlauts and ß included) for the tiny tokenizer and the overfitting test.
PAIRS: list[tuple[str, str]] = [
    ("Hello world.", "Hallo Welt."),
    ("Yes, please.", "Ja, bitte."),
    ("Good morning.", "Guten Morgen."),
    ("Good night.", "Gute Nacht."),
    ("Thank you very much.", "Vielen Dank."),
    ("The house is big.", "Das Haus ist groß."),
    ("The street is long.", "Die Straße ist lang."),
    ("The dog is small.", "Der Hund ist klein."),
    ("The cat sleeps.", "Die Katze schläft."),
    ("I am tired.", "Ich bin müde."),
    ("We are happy.", "Wir sind glücklich."),
    ("She reads a book.", "Sie liest ein Buch."),
    ("He drinks water.", "Er trinkt Wasser."),
    ("The apple is green.", "Der Apfel ist grün."),
    ("The door is open.", "Die Tür ist offen."),
    ("The child plays.", "Das Kind spielt."),
    ("I like music.", "Ich mag Musik."),
    ("We eat bread.", "Wir essen Brot."),
    ("The weather is nice.", "Das Wetter ist schön."),
    ("Where is the station?", "Wo ist der Bahnhof?"),
    ("How are you?", "Wie geht es dir?"),
    ("I am fine.", "Mir geht es gut."),
    ("The car is fast.", "Das Auto ist schnell."),
    ("The train is late.", "Der Zug ist spät."),
    ("My father works.", "Mein Vater arbeitet."),
    ("My mother cooks.", "Meine Mutter kocht."),
    ("The bird sings.", "Der Vogel singt."),
    ("The water is cold.", "Das Wasser ist kalt."),
    ("The soup is hot.", "Die Suppe ist heiß."),
    ("I speak German.", "Ich spreche Deutsch."),
    ("You are right.", "Du hast recht."),
    ("The city is beautiful.", "Die Stadt ist schön."),
    ("The bridge is old.", "Die Brücke ist alt."),
    ("The oven is warm.", "Der Ofen ist warm."),
    ("I need help.", "Ich brauche Hilfe."),
    ("Close the door!", "Schließ die Tür!"),
    ("Open the window!", "Öffne das Fenster!"),
    ("The exercise is easy.", "Die Übung ist leicht."),
    ("Apples are tasty.", "Äpfel sind lecker."),
    ("The sun shines.", "Die Sonne scheint."),
    ("It is raining.", "Es regnet."),
    ("The tree is tall.", "Der Baum ist hoch."),
    ("We go home.", "Wir gehen nach Hause."),
    ("The milk is fresh.", "Die Milch ist frisch."),
    ("I write a letter.", "Ich schreibe einen Brief."),
    ("The teacher laughs.", "Der Lehrer lacht."),
    ("The boy runs.", "Der Junge läuft."),
    ("The girl sings.", "Das Mädchen singt."),
    ("Five small birds.", "Fünf kleine Vögel."),
    ("The key is lost.", "Der Schlüssel ist weg."),
    ("The shop is closed.", "Der Laden ist geschlossen."),
]


def seed_everything(seed: int = 0) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same global RNG state."""
    seed_everything(0)
    yield


@pytest.fixture(scope="session")
def pairs() -> list[tuple[str, str]]:
    return list(PAIRS)


@pytest.fixture(scope="session")
def tokenizer() -> TextTokenizer:
    """A BPE tokenizer trained on the EN and DE sides of :data:`PAIRS` (deterministic)."""
    texts = [t for pair in PAIRS for t in pair]
    return TextTokenizer.train(texts, vocab_size=400, min_frequency=2)


@pytest.fixture(scope="session")
def make_config(tokenizer):
    """``make_config(**overrides) -> ModelConfig``: the tiny config sized to the tiny tokenizer."""

    def factory(**overrides) -> ModelConfig:
        kw = dict(
            vocab_size=tokenizer.vocab_size,
            d_model=32,
            n_heads=4,
            n_encoder_layers=2,
            n_decoder_layers=2,
            d_ff=64,
            dropout=0.0,
            attention_dropout=0.0,
            max_len=64,
        )
        kw.update(overrides)
        return ModelConfig(**kw)

    return factory


@pytest.fixture(scope="session")
def make_model(make_config):
    """``make_model(seed=0, **config_overrides) -> Transformer`` in eval mode, deterministically initialised."""

    def factory(seed: int = 0, **overrides) -> Transformer:
        cfg = make_config(**overrides)
        torch.manual_seed(seed)
        return Transformer(cfg).eval()

    return factory


@pytest.fixture(scope="session")
def encode_src(tokenizer):
    """``encode_src(text) -> ids``: encoder ids of ``text`` followed by ``<eos>`` (as in training)."""
    return lambda text: tokenizer.encode(text).ids + [2]


@pytest.fixture(scope="session")
def encode_tgt(tokenizer):
    """``encode_tgt(text) -> ids``: decoder ids ``<bos> … <eos>`` of ``text`` (as in training)."""
    return lambda text: [1] + tokenizer.encode(text).ids + [2]


# --- the tiny Hugging Face reference models ---------------------------------------------------------------------
def _hf_reference(tmp_path_factory, name: str, write) -> SimpleNamespace:
    """A tiny random ``transformers`` model saved as a Hugging Face folder (``write``: a writer of
    ``tests/hf_fixtures.py``) and loaded by our code: ``folder``, the ``reference`` model it was saved from, our
    ``model``, its ``cfg`` and ``info``. Skips without ``transformers``."""
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp(name)
    reference = write(folder)
    model, cfg, info = load_hf_model(folder)
    return SimpleNamespace(folder=folder, reference=reference, model=model, cfg=cfg, info=info)


@pytest.fixture(scope="module")
def hf_marian(tmp_path_factory) -> SimpleNamespace:
    """The tiny MarianMT reference (:func:`_hf_reference`); the ``marian`` fixtures of some modules are other
    folders (a tokenizer alone, a model with its own settings)."""
    return _hf_reference(tmp_path_factory, "opus-mt-tiny", write_tiny_marian_model)


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory) -> SimpleNamespace:
    """The tiny GPT-2 reference (:func:`_hf_reference`)."""
    return _hf_reference(tmp_path_factory, "gpt2-tiny", write_tiny_gpt2_model)


# --- the browser tests' app and Chromium ----------------------------------------------------------------------------
# One app for every browser test module, and one more with the tiny Hugging Face folders for those that open them
# (session scope is per xdist worker: one of each per browser group that uses it). Starting the app (and loading its
# model on the first visit) again for each module cost seconds a module. Chromium is one per module:
# Playwright's sync API keeps an event loop running on the worker's thread while it is open, and a later module's
# asyncio.run (the load benchmark's client) or its own Playwright then fails. Every test opens its own browser
# context, so no test sees another's session. browser_helpers is imported inside the fixtures: importing
# it skips when Chromium or playwright is missing, which must skip the test, not every test of the suite.
@pytest.fixture(scope="session")
def server():
    """The app as ``make run`` starts it, shared by the browser tests. Yields the base URL."""
    from browser_helpers import serve_app

    yield from serve_app({}, "streamlit-server.log")


@pytest.fixture(scope="session")
def hf_server(hf_root):
    """The app with ``hf_root``'s tiny folders beside the shipped models, shared as ``server`` is. Yields the URL."""
    from browser_helpers import serve_app

    yield from serve_app({"ATTENTION_EXPLORER_CHECKPOINTS": str(hf_root.path)}, "streamlit-hf-server.log")


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium under Playwright, shared by one module's browser tests."""
    import browser_helpers  # noqa: F401 (skips without Chromium or playwright)

    from benchmarks.app_server import chromium

    with chromium() as b:
        yield b


@pytest.fixture
def new_page(browser):
    """``new_page(viewport) -> Page``; every page opened is closed after the test."""
    from browser_helpers import DESKTOP, RUN_TIMEOUT_MS

    from benchmarks.app_server import open_page

    pages = []

    def factory(viewport=DESKTOP):
        pages.append(open_page(browser, viewport, RUN_TIMEOUT_MS))
        return pages[-1]

    yield factory
    for page in pages:
        page.context.close()


@pytest.fixture(scope="session")
def cluster():
    """``make serve``'s nginx before two workers (:func:`deploy.serve.serving`; ``.notes``: what it said), shared by the
    deploy and failover tests (a test that kills a worker waits until it is back). Skips without nginx."""
    from deploy import DeployError, nginx
    from deploy.serve import serving

    try:
        nginx.find_nginx()
    except DeployError as exc:
        pytest.skip(str(exc))
    notes: list[str] = []
    with serving(workers=2, say=notes.append) as running:
        running.notes = notes
        yield running


# --- tiny Hugging Face folders ----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def hf_root(tmp_path_factory):
    """A folder with ``opus-mt-tiny`` and ``gpt2-tiny`` (as ``huggingface-cli download`` writes them, built offline
    by ``tests/hf_fixtures.py``): ``hf_root.path``, and the reference ``transformers`` models as
    ``hf_root.reference[name]``. Shared by every module (no test writes into it); skips without ``transformers``."""
    pytest.importorskip("transformers", reason="transformers (a dev dependency) is not installed")
    from hf_fixtures import write_hf_root

    path, reference = write_hf_root(tmp_path_factory.mktemp("hf-models"))
    return SimpleNamespace(path=path, reference=reference)


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory):
    """The tiny MarianMT and GPT-2 of ``tests/hf_fixtures.py`` loaded as our models: ``hf_models.marian``,
    ``hf_models.gpt2``. Skips without ``transformers``."""
    pytest.importorskip("transformers")
    from hf_fixtures import write_tiny_gpt2_model, write_tiny_marian_model

    from model.hf.loader import load_hf_model

    folders = {}
    for name, write in (("marian", write_tiny_marian_model), ("gpt2", write_tiny_gpt2_model)):
        folder = tmp_path_factory.mktemp(name)
        write(folder)
        folders[name] = load_hf_model(folder)[0]
    return SimpleNamespace(**folders)


# --- one translation step of the tiny model ------------------------------------------------------------------------
@pytest.fixture(scope="session")
def step_ids(encode_src, encode_tgt):
    """``(src, prefix, token)``: "The house is big." and the first three German inputs, the fourth next."""
    tgt = encode_tgt("Das Haus ist groß.")
    return encode_src("The house is big."), tgt[:3], tgt[3]


# --- the Training page's tests ------------------------------------------------------------------------------------
@pytest.fixture
def training_page_env(monkeypatch):
    """No demo limits and one thread for every trainer the Training page's tests launch."""
    from launching import launch

    monkeypatch.delenv(launch.DEMO_ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """``(runs_root, run_dir)``: a real tiny run, launched through :func:`launching.launch.launch` and waited for;
    shared by the Training page's test modules (none writes into it)."""
    from training_page_helpers import TINY, wait_for

    from launching import form, launch
    from training import runs

    root = tmp_path_factory.mktemp("runs")
    os.environ.pop(launch.DEMO_ENV, None)
    run = launch.launch({**form.preset_form("2-minute CPU demo"), **TINY}, root, name="tiny")
    assert wait_for(lambda: (runs.read_status(run) or {}).get("state") in ("finished", "stopped", "failed")), (
        runs.log_tail(run)
    )
    return root, run


@pytest.fixture
def app_at_repo_root(monkeypatch):
    """The app-level AppTest modules run from the repository root without extra checkpoints (unless a test adds them)
    and without the hosted demo's limits."""
    from ui.checkpoints import CHECKPOINTS_ENV

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv(CHECKPOINTS_ENV, raising=False)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)


# --- checkpoints for the property-based tests ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def ende():
    """The shipped translator, ``checkpoints/en-de``, as a :class:`model.checkpoint.Checkpoint`."""
    from model.checkpoint import load_checkpoint

    return load_checkpoint(ROOT / "checkpoints" / "en-de")


@pytest.fixture(scope="module")
def brown():
    """The shipped language model, ``checkpoints/brown-lm``, as a :class:`model.checkpoint.Checkpoint`."""
    from model.checkpoint import load_checkpoint

    return load_checkpoint(ROOT / "checkpoints" / "brown-lm")


@pytest.fixture(scope="module")
def tiny(tokenizer, make_model):
    """The conftest fixtures as a checkpoint: a random 2+2-layer model (max_len 64) and the 400-piece tokenizer."""
    from model.checkpoint import Checkpoint

    model = make_model(seed=0)
    return Checkpoint(model, tokenizer, model.cfg)


# --- the training CLI's tiny runs ------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def cli_runs(tmp_path_factory):
    """Run ``straight`` (12 steps) and ``resumed`` (6 steps, then ``--resume --max-steps 12``), in-process; shared by
    test_train_cli.py and test_train_resume.py (their tests copy a run before changing it)."""
    import json

    from train_helpers import TINY, run_main

    from trainer import train

    root = tmp_path_factory.mktemp("runs")
    torch.manual_seed(0)
    straight = run_main(train.main, ["--out", root / "straight", "--max-steps", "12", *TINY])
    first_half = run_main(train.main, ["--out", root / "resumed", "--max-steps", "6", *TINY])
    half_state = json.loads((root / "resumed" / "last" / "trainer_state.json").read_text())
    torch.manual_seed(123)  # the resumed run must not depend on the state of the process it runs in
    second_half = run_main(
        train.main, ["--out", root / "resumed", "--resume", "--max-steps", "12", "--no-progress", "--threads", "1"]
    )
    return {
        "root": root,
        "straight": straight,
        "first_half": first_half,
        "second_half": second_half,
        "half_state": half_state,
    }
