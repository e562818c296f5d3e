"""Every session-state key and link parameter of the app, declared once: one record per page.

A page's widgets keep their values in ``st.session_state`` under keys of that page, most of them mirrored in the
link by a query parameter. Each page declares here, once, every key it uses (all with the page's one prefix:
``tr_`` Translate, ``at_`` Attention, ``dl_`` Decoding lab, ``pe_`` Positional encoding, ``tk_`` Tokenization,
``we_`` Worked examples, ``tn_`` Training, and ``app_`` for what the sidebar and every page share): its link
parameter, and which of two events that cross pages forgets it. Picking another checkpoint forgets what belongs to
one model (a layer or head index of one model means nothing to another); a new shared sentence forgets what belongs
to one sentence (a step, a sweep that was asked for). The checkpoint picker and the sentence boxes
(:mod:`ui.state`) go through :data:`PAGES` instead of knowing any page's keys, and
``tests/test_page_state_declared.py`` fails when the code uses a key or reads a link parameter not declared here.

A *family* field stands for keys derived from it per index (``tr_attr_method``, ``dl_w_beam``,
``tn_form_lr_tiny``): :meth:`Field.sub` builds them, and forgetting the field forgets them all. An *element*
field names a container or chart (for its CSS class or a stable identity), which holds no state.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Literal, MutableMapping

from ui import url

Event = Literal["model", "sentence"]


@dataclass(frozen=True)
class Field:
    """One session key of a page, or a family of keys derived from one stem.

    Attributes:
        key: the session-state key (for a family: the stem of its keys, ``f"{key}_{suffix}"``).
        param: its link parameter (``None``: kept out of the link).
        forget_on: the events that forget it (``"model"``: another checkpoint; ``"sentence"``: a new shared
            sentence), in the session and in the link; for a family, every key derived from it.
        family: the key is a stem for keys derived per index (:meth:`sub`).
        element: a container's or chart's key (its CSS class ``st-key-…``), never read as state.
        members: a family's named members, each a :class:`Field` whose ``key`` is the suffix
            (``Field("layer", "attr_layer", ("model",))`` in the family ``tr_attr``: the key ``tr_attr_layer``),
            with its own link parameter and events.
        keep_link: an event forgets the key but leaves its link parameter, so that the value is read from the
            link again (a setting whose default belongs to a model).
    """

    key: str
    param: str | None = None
    forget_on: tuple[Event, ...] = ()
    family: bool = False
    element: bool = False
    members: tuple["Field", ...] = ()
    keep_link: bool = False

    def sub(self, *parts: Any) -> str:
        """The key of one member of a family: ``TRANSLATE.attr.sub("layer")`` → ``"tr_attr_layer"``.

        Raises:
            ValueError: the field is not a family, or no part is given.
        """
        if not self.family or not parts:
            raise ValueError(f"{self.key!r} is not a family of keys, or no part was given")
        return "_".join([self.key, *map(str, parts)])

    def link_params(self) -> tuple[str, ...]:
        """Every link parameter of the field (a family: its members' too)."""
        names = [self.param] + [m.param for m in self.members]
        return tuple(dict.fromkeys(n for n in names if n))

    def owns(self, key: str) -> bool:
        """Whether ``key`` is this field's key or, for a family, one derived from it."""
        return key == self.key or (self.family and key.startswith(self.key + "_"))

    def init(
        self,
        parse: Callable[[url.Params], url.Parsed[Any]],
        valid: Callable[[Any], bool] | None = None,
        member: str | None = None,
    ) -> None:
        """Seed the widget (a family: its ``member``) from the link the first time it is drawn
        (:func:`ui.url.init_widget`)."""
        url.init_widget(self.sub(member) if member else self.key, parse, valid)

    def put(self, value: Any, default: Any = None, member: str | None = None) -> None:
        """Write the value shown into the link parameter of the field (or of its ``member``; :func:`ui.url.put`: a
        default is left out).

        Raises:
            ValueError: no link parameter is declared there.
        """
        name = self.param if member is None else next((m.param for m in self.members if m.key == member), None)
        if name is None:
            raise ValueError(f"{self.key!r} {member or ''} has no link parameter")
        url.put(name, value, default)

    def forget(self, event: Event, session: MutableMapping, params: MutableMapping) -> None:
        """Drop what ``event`` forgets: the field's key (a family: every key derived from it) and its link
        parameters when the field goes on ``event``; else a family's members that go on it."""
        if event in self.forget_on:
            for key in [k for k in list(session) if isinstance(k, str) and self.owns(k)]:
                session.pop(key, None)
            for name in () if self.keep_link else self.link_params():
                params.pop(name, None)
            return
        for m in self.members:
            if event in m.forget_on:
                session.pop(self.sub(m.key), None)
                if m.param and not m.keep_link:
                    params.pop(m.param, None)


def state(key: str, param: str | None = None, *forget_on: Event) -> Field:
    """A single key (and its link parameter), forgotten on ``forget_on``."""
    return Field(key, param, tuple(forget_on))


def family(key: str, *members: Field, forget_on: tuple[Event, ...] = ()) -> Field:
    """Keys derived from ``key`` per index or name; ``members``: those with a link parameter or an event."""
    return Field(key, forget_on=forget_on, family=True, members=members)


def element(key: str, family: bool = False) -> Field:
    """A container's or chart's key (or, for ``family``, the stem of such keys)."""
    return Field(key, family=family, element=True)


@dataclass(frozen=True)
class PageState:
    """What one page keeps for a browser session: its prefix, and one :class:`Field` per attribute.

    Attributes:
        page: the page's script name (``app_pages/<page>.py``; ``app`` for the sidebar's).
        prefix: the one prefix of all its keys.
        text: the page's text box that shows the shared sentence (``None``: it has none).
    """

    page: str
    prefix: str

    def __post_init__(self) -> None:
        for f in self.fields():
            if not f.key.startswith(self.prefix):
                raise ValueError(f"{self.page}: key {f.key!r} lacks the page's prefix {self.prefix!r}")

    def fields(self) -> tuple[Field, ...]:
        """Every declared field, in declaration order."""
        return tuple(v for f in fields(self) if isinstance(v := getattr(self, f.name), Field))

    @property
    def text(self) -> Field | None:
        """The page's text box that shows the shared sentence (its field ``text_box``), or ``None``."""
        return getattr(self, "text_box", None)

    def forget(self, event: Event, session: MutableMapping, params: MutableMapping) -> None:
        """Another checkpoint (``"model"``) or a new shared sentence (``"sentence"``): every field declared to
        go then is dropped, from the session and from the link."""
        for f in self.fields():
            f.forget(event, session, params)

    def show_sentence(self, session: MutableMapping, text: str) -> None:
        """Put ``text`` into this page's text box (if it has one that has been drawn in this session)."""
        box = self.text
        if box is not None and box.key in session:
            session[box.key] = text


def _attribution(prefix: str) -> Field:
    """The attribution view's keys on a page (:class:`reading_views.attribution.Keys`), its what-if's
    (:mod:`reading_views.whatif`) among them: its layer and head belong to a model, its line over the steps and the
    what-if's word and replacement to a sentence."""
    return Field(
        f"{prefix}attr",
        "attr",
        family=True,
        members=(
            state("method", "attr_method"),
            state("steps", "attr_steps"),
            state("layer", "attr_layer", "model"),
            state("head", "attr_head", "model"),
            state("line", None, "sentence"),
            state("whatif", "whatif"),
            state("word", "whatif_word", "sentence"),
            state("with", "whatif_with", "sentence"),
        ),
    )


@dataclass(frozen=True)
class App(PageState):
    """The sidebar's checkpoint picker and what every page shares."""

    page: str = "app"
    prefix: str = "app_"
    # the picker, and the folder it picked for the pages below the sidebar (app_ckpt_path)
    ckpt: Field = Field("app_ckpt", "ckpt", family=True)
    sentence: Field = state("app_text", "text")  # the shared sentence
    present: Field = state("app_present", "present")


@dataclass(frozen=True)
class Translate(PageState):
    page: str = "translate"
    prefix: str = "tr_"
    text_box: Field = family("tr_text")  # the box, and the presets box beside it (tr_text_preset)
    step: Field = state("tr_step", "step", "sentence")
    layer: Field = state("tr_layer", "layer", "model")
    head: Field = state("tr_head", "head", "model")
    lens: Field = Field("tr_lens", "lens", family=True)  # the toggle, and the table's downloads
    attr: Field = _attribution("tr_")
    box: Field = element("tr_box", family=True)  # the page's groups, which a phone orders (ui.responsive)


@dataclass(frozen=True)
class Attention(PageState):
    page: str = "attention"
    prefix: str = "at_"
    text_box: Field = state("at_text")
    kind: Field = state("at_kind", "kind", "model")
    layer: Field = state("at_layer", "layer", "model")
    head: Field = state("at_head", "head", "model")
    words: Field = state("at_words", "words")
    tab: Field = state("at_tab", "tab")
    # the query (shared by Tokens & lines and Query · key) and key picked, the lines' threshold and focus
    token: Field = family(
        "at_token",
        state("query", "query"),
        state("key", "key"),
        state("threshold", "threshold"),
        state("focus", "focus"),
    )
    qk_sort: Field = state("at_qk_sort", "sort")
    grid: Field = family("at_grid", state("style", "grid"))  # its style, the chart's selection, the head opened
    stat: Field = state("at_stat", "stat")
    ablate: Field = state("at_ablate", "ablate", "model")
    # the button, and the sentence and heads a sweep was asked for (at_sweep_for)
    sweep: Field = family("at_sweep", state("for", "sweep", "sentence"))
    compare: Field = family(
        "at_cmp", state("mode", "compare"), state("text", "compare_text"), state("ckpt", "compare_ckpt")
    )
    export: Field = family("at_export")  # the downloads (the trace, the Query · key numbers)
    chart: Field = element("at_chart", family=True)  # charts and tables drawn per kind, layer and head


@dataclass(frozen=True)
class Decoding(PageState):
    """Its step and forced tokens follow its own sentence key; the beam settings' defaults belong to a model (a
    Hugging Face folder may state its own), so they are read again from the link for the next one."""

    page: str = "decoding"
    prefix: str = "dl_"
    text_box: Field = family("dl_text")
    settings: Field = state("dl_settings", None, "model")  # the rule's settings as last applied
    # one widget a setting (dl_w_beam, …); a model forgets the beam's (see the class)
    w: Field = family(
        "dl_w",
        state("strategy", "strategy"),
        state("temperature", "temperature"),
        state("top_k", "top_k"),
        state("top_p", "top_p"),
        state("seed", "seed"),
        Field("beam", "beam", ("model",), keep_link=True),
        Field("alpha", "alpha", ("model",), keep_link=True),
        state("guard", "guard"),
    )
    forced: Field = Field("dl_forced", "forced", family=True)  # the forced tokens, and every set tried (…_branches)
    src_key: Field = state("dl_src_key")  # the sentence and model the step and forced tokens belong to
    step: Field = state("dl_step", "step")
    force: Field = family("dl_force")  # the forced token's box, its message, its candidate list per step
    cache: Field = family("dl_cache")  # the button that measures the KV cache, and what it measured
    lens: Field = Field("dl_lens", "lens", family=True)
    attr: Field = _attribution("dl_")
    chart: Field = element("dl_chart", family=True)


@dataclass(frozen=True)
class Positional(PageState):
    page: str = "positional"
    prefix: str = "pe_"
    d_model: Field = state("pe_d_model", "d_model")
    length: Field = state("pe_length", "length")
    offset: Field = state("pe_offset", "offset")
    dims: Field = state("pe_dims", "dims")
    head: Field = state("pe_head", "head", "model")


@dataclass(frozen=True)
class Tokenization(PageState):
    page: str = "tokenization"
    prefix: str = "tk_"
    text_box: Field = state("tk_text", "tok_text")
    word: Field = Field("tk_word", "word", family=True)  # the word picked, and the words it counts in (tk_word_of)
    train_text: Field = state("tk_train_text", "train_text")
    vocab: Field = state("tk_vocab", "vocab")


@dataclass(frozen=True)
class Lecture(PageState):
    """Worked examples: the live numbers' kind, layer and head belong to a model; the editable matrices to none."""

    page: str = "lecture"
    prefix: str = "we_"
    text_box: Field = family("we_text")
    numbers: Field = state("we_numbers", "numbers")
    kind: Field = state("we_kind", "kind", "model")
    layer: Field = state("we_layer", "layer", "model")
    head: Field = state("we_head", "head", "model")
    export: Field = state("we_export")
    scale: Field = state("we_scale", "scaled")
    causal: Field = state("we_causal", "causal")
    heads: Field = state("we_heads", "heads")
    seed: Field = Field("we_seed", "seed", element=True)  # only the link sets it: no widget, no state
    # one editor a matrix (we_m_q, we_m_x, …) and the matrix it started from (we_m_q_from_link)
    matrix: Field = family("we_m", *(state(m, m) for m in ("q", "k", "v", "x", "gamma", "beta")))


@dataclass(frozen=True)
class Training(PageState):
    page: str = "training"
    prefix: str = "tn_"
    watch: Field = family("tn_watch")  # the run watched (kept across pages), and its picker per run (tn_watch_pick_…)
    form: Field = family("tn_form")  # the launch form's preset (tn_form_preset) and fields, one set per preset
    delete: Field = state("tn_delete")
    exported: Field = state("tn_exported")
    compare: Field = family("tn_compare", state("runs", "compare"), state("x", "compare_x"))  # and "touched"
    heads_forming: Field = family("tn_hf")  # the probe sentence, the kind, the pinned snapshot, its slider per run
    chart: Field = element("tn_chart", family=True)


APP, TRANSLATE, ATTENTION, DECODING = App(), Translate(), Attention(), Decoding()
POSITIONAL, TOKENIZATION, LECTURE, TRAINING = Positional(), Tokenization(), Lecture(), Training()
#: Every page, the sidebar's first.
PAGES: tuple[PageState, ...] = (APP, TRANSLATE, ATTENTION, DECODING, POSITIONAL, TOKENIZATION, LECTURE, TRAINING)
#: The prefix of the step buttons' containers (:func:`ui.widgets.step_buttons`), one a step field: ``ae_steps_tr_step``
#: (the CSS of :mod:`ui.responsive` finds them by it).
STEP_BUTTONS = "ae_steps_"


def declared() -> list[Field]:
    """Every declared field of every page."""
    return [f for page in PAGES for f in page.fields()]


def owner(key: str) -> Field | None:
    """The field that declares ``key`` (itself, or a family it derives from; the longest stem wins), or ``None``."""
    if key.startswith(STEP_BUTTONS):
        key = key[len(STEP_BUTTONS) :]
    found = [f for f in declared() if f.owns(key)]
    return max(found, key=lambda f: len(f.key)) if found else None


def forget(event: Event, session: MutableMapping, params: MutableMapping) -> None:
    """Every page forgets what ``event`` (another checkpoint, a new shared sentence) makes meaningless."""
    for page in PAGES:
        page.forget(event, session, params)
