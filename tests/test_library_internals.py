"""The private parts of Streamlit and Plotly this project leans on, checked by name, so that an upgrade that moves
or drops one fails here, with a message naming the internal, the installed version and who uses it, instead of
somewhere deep in the load benchmark or as figures that silently stop being fast.

* ``benchmarks/load_client.py`` speaks Streamlit's websocket protocol itself (``benchmarks/page_view.py`` holding
  the page): they build ``BackMsg`` protobufs and read ``ForwardMsg`` ones (``streamlit.proto``, not a public API),
  field by field.
* ``viz.theme.figure`` builds Plotly figures with the private ``go.Figure(..., _validate=False)``, which skips
  Plotly's property validation (a heatmap: 28 ms validated, ~1 ms not).

``requirements.txt`` bounds both libraries below their next major version; within it, these tests are the check.
"""

from __future__ import annotations

import importlib

import pytest

streamlit = pytest.importorskip("streamlit")
plotly = pytest.importorskip("plotly")

LOAD_CLIENT = "benchmarks/load_client.py and benchmarks/page_view.py"
#: (protobuf module, message, dotted field path) the load client reads or writes. A path walks into sub-messages;
#: ``oneof:type`` names a oneof group.
PROTO_FIELDS = [
    ("ForwardMsg_pb2", "ForwardMsg", path)
    for path in (
        "oneof:type",
        "delta",
        "page_info_changed.query_string",
        "navigation.page_script_hash",
        "session_event.script_compilation_exception.message",
        "script_finished",
        "metadata.delta_path",
        "delta.oneof:type",
        "delta.fragment_id",
        "delta.add_block",
        "delta.new_element",
        "delta.add_block.oneof:type",
        "delta.add_block.tab_container.id",
        "delta.add_block.tab_container.default_tab_index",
        "delta.add_block.tab.label",
        "delta.new_element.oneof:type",
        "delta.new_element.markdown.body",
        "delta.new_element.exception.type",
        "delta.new_element.exception.message",
        "delta.new_element.plotly_chart.spec",
        "delta.new_element.selectbox.raw_value",
        "delta.new_element.selectbox.default",
        "delta.new_element.selectbox.set_value",
        "delta.new_element.selectbox.options",
        "delta.new_element.multiselect.raw_values",
        "delta.new_element.slider.value",
        "delta.new_element.checkbox.value",
        "delta.new_element.button.id",
        "delta.new_element.button.label",
    )
] + [
    ("BackMsg_pb2", "BackMsg", path)
    for path in (
        "rerun_script.query_string",
        "rerun_script.page_name",
        "rerun_script.page_script_hash",
        "rerun_script.fragment_id",
        "rerun_script.widget_states.widgets.id",
        "rerun_script.widget_states.widgets.trigger_value",
        "rerun_script.widget_states.widgets.string_value",
        "rerun_script.widget_states.widgets.bool_value",
        "rerun_script.widget_states.widgets.double_value",
        "rerun_script.widget_states.widgets.string_array_value.data",
        "rerun_script.widget_states.widgets.double_array_value.data",
    )
]
#: ``ForwardMsg.ScriptFinishedStatus`` values the load client compares with.
FINISHED_STATUSES = [
    "FINISHED_SUCCESSFULLY",
    "FINISHED_WITH_COMPILE_ERROR",
    "FINISHED_EARLY_FOR_RERUN",
    "FINISHED_FRAGMENT_RUN_SUCCESSFULLY",
]


def _gone(what: str, user: str) -> str:
    return (
        f"Streamlit {streamlit.__version__}: its internal {what} is gone or renamed; {user} depends on it "
        "(written against Streamlit 1.65-1.67's streamlit.proto). Update the user, or pin Streamlit below this "
        "version in requirements.txt."
    )


def _walk(descriptor, path: str) -> str | None:
    """``None`` when ``path`` exists under the message ``descriptor``, else the part that is missing."""
    for i, part in enumerate(path.split(".")):
        if part.startswith("oneof:"):
            return None if part[6:] in descriptor.oneofs_by_name else part
        field = descriptor.fields_by_name.get(part)
        if field is None:
            return part
        if i < len(path.split(".")) - 1:
            if field.message_type is None:
                return f"{part} (no longer a message)"
            descriptor = field.message_type
    return None


@pytest.mark.parametrize("module, message, path", PROTO_FIELDS, ids=[f"{m}.{p}" for _, m, p in PROTO_FIELDS])
def test_the_protobuf_fields_the_load_client_uses_exist(module, message, path):
    try:
        cls = getattr(importlib.import_module(f"streamlit.proto.{module}"), message)
    except (ImportError, AttributeError):
        pytest.fail(_gone(f"streamlit.proto.{module}.{message}", LOAD_CLIENT))
    missing = _walk(cls.DESCRIPTOR, path)
    assert missing is None, _gone(f"protobuf field {message}.{path} (at {missing!r})", LOAD_CLIENT)


@pytest.mark.parametrize("status", FINISHED_STATUSES)
def test_the_script_finished_statuses_exist(status):
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    assert status in ForwardMsg.ScriptFinishedStatus.keys(), _gone(
        f"ForwardMsg.ScriptFinishedStatus.{status}", LOAD_CLIENT
    )


def test_the_load_client_imports_and_builds_a_rerun():
    """End to end on the installed Streamlit: the client's own rerun message, with each kind of widget value."""
    from benchmarks.page_view import FIELDS, PageView, Widget

    view = PageView(query_string="text=a", page_hash="h")
    values = {
        "string_value": "x",
        "bool_value": True,
        "double_value": 1.5,
        "string_array_value": ["a"],
        "double_array_value": [0.5],
    }
    view.values = {f"w{i}": (name, values[name]) for i, name in enumerate(sorted(set(FIELDS.values())))}
    try:
        msg = view.rerun(Widget("b", "button", "Next", None, []))
        msg.SerializeToString()
    except (AttributeError, TypeError, ValueError) as exc:
        pytest.fail(_gone(f"BackMsg layout ({exc})", LOAD_CLIENT))
    assert len(msg.rerun_script.widget_states.widgets) == len(view.values) + 1


def test_plotly_still_takes_the_private_validate_switch():
    """``viz.theme.figure`` passes ``_validate``: off, a figure is built without checking its properties; on (the
    tests), a misspelt property raises. Either half failing means Plotly changed its private constructor."""
    import plotly.graph_objects as go

    why = (
        f"Plotly {plotly.__version__}: the private go.Figure(..., _validate=...) that viz.theme.figure uses "
        "{}; written against Plotly 5.20-7.x. Update viz.theme.figure, or pin Plotly below this version in "
        "requirements.txt."
    )
    bad = {"data": [{"type": "bar", "y": [1]}], "layout": {"bogusprop": 1}}
    try:
        fast = go.Figure(bad, _validate=False)
    except TypeError:
        pytest.fail(why.format("is no longer accepted"))
    except ValueError:
        pytest.fail(why.format("no longer turns validation off"))
    assert fast.data[0].type == "bar", why.format("builds a different figure")
    with pytest.raises(ValueError):
        go.Figure(bad, _validate=True)  # if this fails, _validate=True no longer checks: the tests check nothing


def test_viz_figure_builds_unvalidated_where_asked(monkeypatch):
    from viz.theme import VALIDATE_ENV, figure

    monkeypatch.setenv(VALIDATE_ENV, "0")
    assert figure([{"type": "bar", "y": [1]}], {"bogusprop": 1}).data[0].type == "bar"
    monkeypatch.setenv(VALIDATE_ENV, "1")
    with pytest.raises(ValueError):
        figure([{"type": "bar", "y": [1]}], {"bogusprop": 1})


@pytest.mark.parametrize("name", ["streamlit", "plotly"])
def test_requirements_bound_the_internals_users_below_the_next_major(name):
    from importlib.metadata import version
    from pathlib import Path

    from packaging.requirements import Requirement

    lines = (Path(__file__).resolve().parent.parent / "requirements.txt").read_text(encoding="utf-8").splitlines()
    (req,) = [Requirement(s) for s in lines if s.strip() and not s.startswith("#") and Requirement(s).name == name]
    installed = version(name)
    assert any(s.operator == "<" for s in req.specifier), f"requirements.txt: {req} has no upper bound"
    assert req.specifier.contains(installed), f"the installed {name} {installed} is outside requirements.txt's {req}"


def test_the_suite_scans_the_installed_components_once_and_an_apptest_still_reaches_that_scan():
    """tests/conftest.py makes Streamlit's scan of the installed packages for components once per test process (each
    new AppTest made it: 0.2 s of CPU each). If Streamlit moves the scan, the suite would silently be slower."""
    from streamlit.components.v2 import manifest_scanner
    from streamlit.components.v2.component_manager import BidiComponentManager

    where = f"streamlit {streamlit.__version__}: streamlit.components.v2.manifest_scanner.scan_component_manifests"
    assert getattr(manifest_scanner.scan_component_manifests, "scanned_once", False), f"{where} is not patched"
    calls = []
    patched = manifest_scanner.scan_component_manifests
    manifest_scanner.scan_component_manifests = lambda *a, **k: calls.append(1) or patched(*a, **k)
    try:
        BidiComponentManager().discover_and_register_components(start_file_watching=False)
    finally:
        manifest_scanner.scan_component_manifests = patched
    assert calls, f"{where}: AppTest's component manager no longer calls it (see tests/conftest.py)"
