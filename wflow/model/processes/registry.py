r"""The registry of the weight processes: ``weights.process`` name -> class.

.. math::

    \text{PROCESSES}: \text{name} \mapsto c, \qquad
    D(t) \sim c.\text{from\_config}(\text{[weights]}, H, d, \Delta t) .

It imports none of the processes: each registers itself (``@register_process``) in its own
file, and :mod:`wflow.model.processes` imports the built-in ones, one line each.
"""

from __future__ import annotations

from wflow.errors import ConfigError
from wflow.model.weights import WeightProcess

__all__ = ["PROCESSES", "ENTRY_POINT_GROUP", "register_process", "get_process", "make_process"]

#: weights.process -> WeightProcess subclass; filled by :func:`register_process`
PROCESSES: dict = {}
#: the entry-point group through which installed packages add weight processes
ENTRY_POINT_GROUP = "wflow.model.processes"


def register_process(cls):
    """Class decorator: make ``cls`` the weight process of ``weights.process = cls.name``.

    A process from outside wflow is found in a new interpreter (``wflow resume``, a Dask
    worker) in one of two ways: an installed package declares it in the entry-point group
    ``wflow.model.processes`` (``name = "package.module:Class"``), or the configuration names it
    by module path, ``weights.process = "package.module:Class"`` — the result file stores
    the configuration, so a resume imports it again.
    """
    if not (isinstance(cls, type) and issubclass(cls, WeightProcess)):
        raise TypeError("register_process: expected a WeightProcess subclass")
    PROCESSES[cls.name] = cls
    return cls


def get_process(name: str):
    """The process class of ``weights.process = name``: the registry, then the entry points
    of ``wflow.model.processes``, then a ``module:Class`` path. ``ValueError`` naming the allowed
    values otherwise."""
    if name in PROCESSES:
        return PROCESSES[name]
    from importlib import import_module, metadata

    try:
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == name:
                return register_process(ep.load())
    except Exception as exc:  # noqa: BLE001 - a broken plug-in is named, not fatal here
        raise ValueError(f"process = {name!r}: its entry point failed to load ({exc})") from None
    if isinstance(name, str) and ":" in name:
        module, _, attr = name.partition(":")
        try:
            mod = import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module + ".").startswith(exc.name + "."):
                raise ValueError(f"process = {name!r}: module {module!r} not found") from None
            raise ValueError(f"process = {name!r}: importing module {module!r} failed "
                             f"({exc})") from None
        except ImportError as exc:
            raise ValueError(f"process = {name!r}: importing module {module!r} failed "
                             f"({exc})") from None
        cls = getattr(mod, attr, None)
        if cls is None:
            raise ValueError(f"process = {name!r}: module {module!r} has no {attr!r}")
        if not (isinstance(cls, type) and issubclass(cls, WeightProcess)):
            raise ValueError(f"process = {name!r}: {module}.{attr} is not a WeightProcess "
                             f"subclass")
        PROCESSES.setdefault(name, cls)
        return cls
    raise ValueError(f"process = {name!r}: allowed values are {', '.join(PROCESSES)} "
                     "or 'module:Class'")


def make_process(spec, H, d, dt, interaction="symmetric"):
    r"""Build the weight process of a ``[weights]`` table [model §10].

    .. math::

        D(t) \sim \text{PROCESSES}[\text{spec["process"]}]
        .\text{from\_config}(\text{spec}, H, d, \Delta t) .

    Parameters
    ----------
    spec : dict
        The ``[weights]`` table: ``process`` (default "frozen": a registered name, an entry
        point or ``module:Class``) and the keys the process declares on its class
        (``params``; e.g. :class:`~wflow.model.processes.ou.OrnsteinUhlenbeck`). Other keys
        are ignored here (the configuration refuses them).
    H, d : int
        Number of heads and dimension.
    dt : float
        Time step (layer rounding, default file times).
    interaction : "symmetric" | "general" [model §1b]: with "general" the process reads
        its weight inputs as any real matrices (:func:`~wflow.model.weights.general_matrices`)
        and steps general matrices (``symmetric = False``); a process without that form
        (``accepts_general`` False) is refused.

    Returns
    -------
    WeightProcess

    Raises
    ------
    ConfigError
        Unknown process or bad value, one line naming the field and the allowed values.
    """
    spec = dict(spec or {})
    kind = spec.get("process", "frozen")
    try:
        cls = get_process(kind)
    except ValueError as exc:
        raise ConfigError(f"weights.{exc}") from None
    if interaction == "symmetric":
        return cls.from_config(spec, H, d, dt)
    if not getattr(cls, "accepts_general", False):
        raise ConfigError(f"weights.process = {kind!r} with model.interaction = 'general': this "
                          "process keeps D_h symmetric; allowed: frozen, ou, layers, file")
    from wflow.model.weights import general_matrices

    with general_matrices():
        proc = cls.from_config(spec, H, d, dt)
    proc.symmetric = False
    return proc
