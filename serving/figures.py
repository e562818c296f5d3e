"""Figures built once per process and shared by every session that draws the same one.

A room of visitors on the Attention page draws the same heatmaps again and again (same sentence, layer, head),
and building a Plotly figure costs far more than sending it: a six-head layer of heatmaps or the model grid took
most of a click's 0.16 s of server CPU, all of it under the interpreter lock every session shares
(``python -m benchmarks.load --scenario attention``). :func:`shared` builds a figure once per distinct
arguments and hands the same object to every later call with equal arguments.

A shared figure must never be changed: Streamlit's ``plotly_chart`` reads it (``to_dict`` copies), and
:func:`ui.presentation.enlarged` enlarges a copy. Equal arguments are equal by value: arrays (NumPy or torch) by
dtype, shape and a digest of their bytes, sequences and mappings item by item.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Callable, Hashable, Mapping, TypeVar

import numpy as np

from serving.memory import DRAWING_BYTES, FIGURE_BYTES, ByteLRU, nbytes, set_aside

F = TypeVar("F")

_lock = threading.Lock()
#: The figures kept, within :data:`serving.memory.FIGURE_BYTES` less what the pages being drawn may use
#: (:data:`serving.memory.DRAWING_BYTES`; least recently drawn dropped first).
_figures = ByteLRU(FIGURE_BYTES - set_aside(DRAWING_BYTES))
built = 0  # figures built so far in this process (tests read it)


def value_key(value: Any) -> Hashable:
    """A hashable key equal for equal values: arrays by dtype, shape and a digest of their bytes.

    Raises:
        TypeError: a value of a type with no notion of equal content here (pass arrays, numbers, strings, and
            sequences or mappings of them).
    """
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor, without importing torch here
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ("array", str(data.dtype), data.shape, hashlib.blake2b(data.tobytes(), digest_size=16).digest())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((str(k), value_key(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(value_key(v) for v in value))
    raise TypeError(f"no content key for a {type(value).__name__}")


def shared(build: Callable[..., F], *args: Any, **kwargs: Any) -> F:
    """``build(*args, **kwargs)``, built once per distinct arguments in this process and shared (see the module's
    rule: never change what it returns)."""
    global built
    key = (build.__module__, build.__qualname__, value_key(args), value_key(kwargs))
    with _lock:
        if key in _figures:
            return _figures.get(key)
    figure = build(*args, **kwargs)  # outside the lock: two sessions may build the same one once each, no harm
    size = nbytes(figure)
    with _lock:
        built += 1
        _figures.put(key, figure, size)
    return figure
