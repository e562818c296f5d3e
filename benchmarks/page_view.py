"""What one browser tab keeps of Streamlit's ``ForwardMsg`` stream, for :mod:`benchmarks.load_client`: the
widgets drawn (by label, with their current values), the query string and page the server set, the page's
``Step k of N``, the charts' titles and any exception shown; and the ``rerun_script`` ``BackMsg`` the tab sends
back for a click or a choice.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

STEP_RE = re.compile(r"Step (\d+) of (\d+)")
#: The ``WidgetState`` field each kind of widget element is sent in (``tabs``: an ``st.tabs`` with a key).
FIELDS = {
    "selectbox": "string_value",
    "radio": "string_value",
    "checkbox": "bool_value",
    "text_input": "string_value",
    "text_area": "string_value",
    "multiselect": "string_array_value",
    "number_input": "double_value",
    "slider": "double_array_value",
    "tabs": "string_value",
}


@dataclass
class Widget:
    """A widget drawn in the last run: ``kind`` is the element's name (``selectbox``, ``button``, ``tabs``…),
    ``field`` the ``WidgetState`` value it is sent in (``None`` for a button), ``options`` its choices."""

    id: str
    kind: str
    label: str
    field: str | None
    options: list[str]
    fragment_id: str = ""


def initial_value(kind: str, el: Any) -> tuple[str, Any] | None:
    """``(WidgetState field, value)`` a browser holds for a widget element just drawn: the value the server set
    (``set_value``), else the element's default; ``None`` for a button or an empty value."""
    if kind in ("selectbox", "radio"):
        if el.set_value:
            return ("string_value", el.raw_value) if el.HasField("raw_value") else None
        has_default = el.HasField("default") if kind == "selectbox" else True
        return ("string_value", el.options[el.default]) if has_default and 0 <= el.default < len(el.options) else None
    if kind == "checkbox":
        return "bool_value", bool(el.value if el.set_value else el.default)
    if kind in ("text_input", "text_area"):
        return "string_value", el.value if el.set_value else el.default
    if kind == "multiselect":
        return "string_array_value", list(el.raw_values if el.set_value else (el.options[i] for i in el.default))
    if kind == "number_input":
        return "double_value", el.value if el.set_value else el.default
    if kind == "slider":
        if el.options:  # a select_slider: its values are the option labels
            return "string_array_value", [el.options[int(i)] for i in (el.value if el.set_value else el.default)]
        return "double_array_value", list(el.value if el.set_value else el.default)
    return None


@dataclass
class PageView:
    """The page as one browser tab holds it: widgets of the last run by id, each one's current value, the query
    string and page the server last set, the last ``Step k of N`` drawn, and the exceptions of the last run."""

    query_string: str = ""
    page_hash: str = ""
    session_id: str = ""  # the server's id of this session (its step log, ``ATTENTION_EXPLORER_STEP_LOG``)
    widgets: dict[str, Widget] = field(default_factory=dict)
    values: dict[str, tuple[str, Any]] = field(default_factory=dict)
    step: tuple[int, int] | None = None
    titles: list[str] = field(default_factory=list)  # the titles of the Plotly charts of the last run
    exceptions: list[str] = field(default_factory=list)
    _seen: dict[str, Widget] = field(default_factory=dict)
    _tabs: dict[tuple[int, ...], tuple[Widget, int]] = field(default_factory=dict)  # path → (tabs, default)

    def begin_run(self) -> None:
        self._seen, self._tabs, self.exceptions, self.titles = {}, {}, [], []

    def apply(self, msg: ForwardMsg) -> int | None:
        """Take one ForwardMsg in; returns its ``script_finished`` status, else ``None``."""
        kind = msg.WhichOneof("type")
        if kind == "delta":
            self._delta(msg)
        elif kind == "new_session":
            self.session_id = msg.new_session.initialize.session_id
        elif kind == "page_info_changed":
            self.query_string = msg.page_info_changed.query_string
        elif kind == "navigation":
            self.page_hash = msg.navigation.page_script_hash
        elif kind == "session_event" and msg.session_event.HasField("script_compilation_exception"):
            self.exceptions.append(msg.session_event.script_compilation_exception.message)
        elif kind == "script_finished":
            return msg.script_finished
        return None

    def end_run(self, fragment_id: str = "") -> None:
        """After a run that finished: a full run replaces every widget, a fragment's run only the fragment's
        (the browser forgets the widgets a run did not draw)."""
        if fragment_id:
            kept = {k: w for k, w in self.widgets.items() if w.fragment_id != fragment_id}
            self.widgets = kept | self._seen
        else:
            self.widgets = dict(self._seen)
        self.values = {k: v for k, v in self.values.items() if k in self.widgets}

    def _delta(self, msg: ForwardMsg) -> None:
        delta, path = msg.delta, tuple(msg.metadata.delta_path)
        if delta.WhichOneof("type") == "add_block":
            block = delta.add_block
            if block.WhichOneof("type") == "tab_container" and block.tab_container.id:
                tabs = Widget(block.tab_container.id, "tabs", "", FIELDS["tabs"], [], delta.fragment_id)
                self._tabs[path] = tabs, block.tab_container.default_tab_index
                self._add(tabs, None)
            elif block.WhichOneof("type") == "tab" and path[:-1] in self._tabs:
                tabs, default = self._tabs[path[:-1]]
                tabs.options.append(block.tab.label)  # the tab blocks follow their container, in order
                if len(tabs.options) - 1 == default and tabs.id not in self.values:
                    self.values[tabs.id] = (FIELDS["tabs"], block.tab.label)
            return
        element = delta.new_element
        kind = element.WhichOneof("type") if delta.WhichOneof("type") == "new_element" else None
        if kind is None:  # not a new element, or one of no known type: nothing to read
            return
        el = getattr(element, kind)
        if kind == "markdown" and (m := STEP_RE.search(el.body)):
            self.step = int(m.group(1)), int(m.group(2))
        elif kind == "exception":
            self.exceptions.append(f"{el.type}: {el.message}")
        elif kind == "plotly_chart":
            title = json.loads(el.spec or "{}").get("layout", {}).get("title", {})
            self.titles.append(title.get("text", "") if isinstance(title, dict) else str(title))
        elif getattr(el, "id", "") and hasattr(el, "label"):
            value = initial_value(kind, el)
            widget = Widget(
                el.id,
                kind,
                el.label,
                value[0] if value else FIELDS.get(kind),
                [str(o) for o in getattr(el, "options", [])],
                delta.fragment_id,
            )
            if getattr(el, "set_value", False):
                self.values.pop(el.id, None)
            self._add(widget, value)

    def _add(self, widget: Widget, value: tuple[str, Any] | None) -> None:
        self._seen[widget.id] = widget
        if value is not None and widget.id not in self.values:
            self.values[widget.id] = value

    def find(self, label: str = "", kind: str | None = None) -> Widget | None:
        """The widget of the last run with this label (and kind, when given), or ``None``."""
        return next((w for w in self.widgets.values() if w.label == label and kind in (None, w.kind)), None)

    def rerun(self, trigger: Widget | None = None, fragment_id: str = "") -> BackMsg:
        """The ``rerun_script`` BackMsg a browser sends: query string, page, every widget's current value, and
        ``trigger``'s ``trigger_value: true`` for a click."""
        msg = BackMsg()
        state = msg.rerun_script
        state.query_string, state.page_script_hash, state.fragment_id = self.query_string, self.page_hash, fragment_id
        for wid, (name, value) in self.values.items():
            ws = state.widget_states.widgets.add(id=wid)
            if name.endswith("_array_value"):
                getattr(ws, name).data.extend(value)
            else:
                setattr(ws, name, value)
        if trigger is not None:
            state.widget_states.widgets.add(id=trigger.id, trigger_value=True)
        return msg
