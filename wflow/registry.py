r"""The one rule of every registry of wflow: a name is registered once.

.. math::

    \text{register}(T, k, v):\quad T \leftarrow T \cup \{k \mapsto v\}
    \quad\text{if } k \notin T \text{ (or } \texttt{replace=True}\text{)} .

The weight processes (:func:`wflow.model.processes.register_process`), the steppers and
their series (:func:`wflow.stepping.registry.register_stepper`,
:func:`~wflow.stepping.registry.register_series`), the recorded series
(:func:`wflow.engine.series.add_series`) and the studies
(:func:`wflow.studies.register_study`) all add their entries through :func:`register`, so
registering a name twice is refused everywhere with the same one line, and replaced only on
request. It imports nothing of wflow, so every layer may use it.
"""

from __future__ import annotations

from collections.abc import MutableMapping

__all__ = ["register", "duplicate_message"]


def duplicate_message(by: str, what: str, name) -> str:
    """The one line refusing a second registration: ``by: a <what> named 'name' is already
    registered (pass replace=True to replace it)``."""
    return f"{by}: a {what} named {name!r} is already registered (pass replace=True to replace it)"


def register(table: MutableMapping, name, obj, *, what: str, by: str, replace: bool = False):
    """``table[name] = obj`` unless ``name`` is registered already; returns ``obj``.

    Parameters
    ----------
    table : the registry (a dict: name -> entry).
    name : the name the entry is registered under.
    obj : the entry.
    what : what the registry holds ("weight process", "stepper", "series", "study"), for the
        message.
    by : the registering function, for the message.
    replace : replace an entry of that name instead of refusing it.

    Raises
    ------
    ValueError
        ``name`` is in ``table`` and not ``replace`` (one line, :func:`duplicate_message`).
    """
    if name in table and not replace:
        raise ValueError(duplicate_message(by, what, name))
    table[name] = obj
    return obj
