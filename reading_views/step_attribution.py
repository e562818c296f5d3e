"""One decoding step's attribution and faithfulness as the view computes them: once, shared, and ahead of the room.

A step's attribution (:func:`reading.attribution.attribute_step`: four methods, one integrated-gradients run) is
computed once per (checkpoint version, source ids, prefix, token, integration points, baseline) through the gate
for heavy work (:mod:`serving.heavy`) and shared by every visitor; the layer and head of the attention methods only pick
from it, so switching them recomputes nothing but the faithfulness of their ranking (a few batched forward passes).
When a step is shown, the next :data:`AHEAD` steps' attribution and faithfulness are prefetched in the background
(:mod:`serving.prefetch`, at the gate's lowest priority), so that a room stepping through the lecturer's sentence finds
each next step ready instead of waiting for the first visitor who opens it.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from decoding.decoded import Decoding
from model.checkpoint import Checkpoint
from reading.attribution import StepAttribution, attribute_step
from reading.faithfulness import Faithfulness, faithfulness
from reading.gradients import pass_rows
from reading.step import Step
from serving import heavy, prefetch
from ui.checkpoints import checkpoint_version

BASELINE = "unk"
#: Steps after the one shown whose attribution (and faithfulness at the visitor's layer and head) is prefetched: two,
#: so that a visitor stepping ahead of the room still finds the next step started.
AHEAD = 2


class StepInputs(NamedTuple):
    """One decoding step as :func:`reading.attribution.attribute_step` reads it."""

    src_ids: tuple[int, ...]  #: ``()`` for a decoder-only model (its prompt is in the prefix)
    prefix: tuple[int, ...]  #: ``<bos>`` (+ a prompt) + the tokens taken before this step
    token_id: int  #: the token taken at this step


def step_inputs(ckpt: Checkpoint, src_ids: Sequence[int], decoding: Decoding, step: int) -> StepInputs:
    """Step ``step`` (1-based) of ``decoding``: its source, the decoder's inputs so far and the token taken."""
    src = tuple(src_ids) if ckpt.config.is_encoder_decoder else ()
    return StepInputs(src, decoding.tokens[: len(decoding.prefix) + step - 1], decoding.generated[step - 1])


def attribution_key(version: tuple, inputs: StepInputs, n_steps: int) -> tuple:
    """The gate's key of a step's attribution (``version``: :func:`ui.state.checkpoint_version`)."""
    return ("attr", *version, *inputs, n_steps, BASELINE)


def faithfulness_key(version: tuple, inputs: StepInputs, n_steps: int, layer: int | None, head: int | None) -> tuple:
    """The gate's key of a step's faithfulness at ``layer`` / ``head``."""
    return ("faithful", *version, *inputs, n_steps, BASELINE, layer, head)


def _attribute(ckpt: Checkpoint, inputs: StepInputs, n_steps: int) -> StepAttribution:
    # a long sentence's points in passes of a bounded size: all at once, one step's reading took 683 MB while it ran
    rows = pass_rows(Step(tuple(inputs.src_ids or ()), tuple(inputs.prefix), inputs.token_id))
    return attribute_step(
        ckpt.model,
        inputs.src_ids or None,
        inputs.prefix,
        inputs.token_id,
        n_steps=n_steps,
        baseline=BASELINE,
        internal_batch_size=rows,
    )


def _faithfulness(ckpt: Checkpoint, reading: StepAttribution, layer: int | None, head: int | None) -> Faithfulness:
    return faithfulness(ckpt.model, reading.step, reading.all_scores(layer, head))


def shared_attribution(ckpt: Checkpoint, inputs: StepInputs, n_steps: int) -> StepAttribution:
    """Every method's reading of one step, computed once per checkpoint version, step and settings, shared.

    Raises:
        ValueError: the step does not fit the model (:func:`reading.attribution.attribute_step`).
    """
    return heavy.shared(
        attribution_key(checkpoint_version(ckpt), inputs, n_steps),
        lambda: _attribute(ckpt, inputs, n_steps),
        "the attribution of this step",
    )


def shared_faithfulness(
    ckpt: Checkpoint, inputs: StepInputs, n_steps: int, reading: StepAttribution, layer: int | None, head: int | None
) -> Faithfulness:
    """Comprehensiveness and sufficiency of every method's ranking (the attention methods at ``layer`` / ``head``),
    shared. Raises ``ValueError`` when no piece may be masked (a source that is only ``<eos>``)."""
    return heavy.shared(
        faithfulness_key(checkpoint_version(ckpt), inputs, n_steps, layer, head),
        lambda: _faithfulness(ckpt, reading, layer, head),
        "the faithfulness of each method",
    )


def prefetch_after(
    ckpt: Checkpoint,
    src_ids: Sequence[int],
    decoding: Decoding,
    step: int,
    n_steps: int,
    layer: int | None,
    head: int | None,
) -> bool:
    """Ask the prefetcher (:data:`serving.prefetch.PREFETCH`) for the attribution and the faithfulness (at ``layer`` /
    ``head``) of the :data:`AHEAD` steps after ``step`` (0: the first ones) of ``decoding``, computed in the
    background at the gate's lowest priority; steps whose both are kept already are left out. Returns whether a job
    was queued (none after the last step, when every later step is read, or with prefetch off). A step that cannot
    be attributed is left to the visitor's own request, which says why."""
    version = checkpoint_version(ckpt)  # stats the folder's files: here, in the visitor's run, not in the worker
    # Only the steps not read yet: once a room has read the sentence, a click asks nothing of the worker, whose
    # wake-up on every visitor's click was work for the interpreter every session shares
    later = []
    for t in range(step + 1, min(step + AHEAD, len(decoding.generated)) + 1):
        inputs = step_inputs(ckpt, src_ids, decoding, t)
        kept = heavy.GATE.cached(attribution_key(version, inputs, n_steps)) and heavy.GATE.cached(
            faithfulness_key(version, inputs, n_steps, layer, head)
        )
        if not kept:
            later.append(inputs)
    if not later:
        return False

    def attribution(inputs: StepInputs) -> Callable[[heavy.Gate], None]:
        def task(gate: heavy.Gate) -> None:
            try:
                gate.prefetch(
                    attribution_key(version, inputs, n_steps),
                    lambda: _attribute(ckpt, inputs, n_steps),
                    "the attribution of a later step",
                )
            except ValueError:  # a step the view cannot read (it says why when a visitor opens it)
                pass

        return task

    def faithful(inputs: StepInputs) -> Callable[[heavy.Gate], None]:
        def task(gate: heavy.Gate) -> None:
            reading = gate.lookup(attribution_key(version, inputs, n_steps))
            if isinstance(reading, StepAttribution):  # else a visitor is computing it now: theirs to finish
                try:
                    gate.prefetch(
                        faithfulness_key(version, inputs, n_steps, layer, head),
                        lambda: _faithfulness(ckpt, reading, layer, head),
                        "the faithfulness of a later step",
                    )
                except ValueError:  # no piece to mask: the view says so when a visitor opens the step
                    pass

        return task

    tasks = [make(inputs) for inputs in later for make in (attribution, faithful)]
    return prefetch.PREFETCH.ask(
        ("attr", *version, later[0], n_steps, layer, head), tasks, alive=prefetch.session_alive()
    )
