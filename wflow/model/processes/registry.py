r"""The registry of the weight processes: ``weights.process`` name -> class.

.. math::

    \text{PROCESSES}: \text{name} \mapsto c, \qquad
    D(t) \sim c.\text{from\_config}(\text{[weights]}, H, d, \Delta t) .

It imports none of the processes: each registers itself (``@register_process``) in its own
file, and :mod:`wflow.model.processes` imports the built-in ones, one line each.
"""

from __future__ import annotations

from wflow.errors import ConfigError
from wflow.model.weights import WeightProcess, general_matrices
from wflow.params import choices_text
from wflow.registry import register

__all__ = ["PROCESSES", "ENTRY_POINT_GROUP", "register_process", "get_process", "make_process",
           "is_deterministic", "deterministic_text", "general_processes"]

#: weights.process -> WeightProcess subclass; filled by :func:`register_process`
PROCESSES: dict = {}
#: the entry-point group through which installed packages add weight processes
ENTRY_POINT_GROUP = "wflow.model.processes"


def _undeclared(cls) -> str:
    """What ``cls`` fails to declare of the protocol, as one line ("" when nothing)."""
    if not (isinstance(cls, type) and issubclass(cls, WeightProcess)):
        return f"{cls!r} is not a WeightProcess subclass"
    if not isinstance(getattr(cls, "deterministic", None), bool):
        return (f"{cls.__name__} does not declare 'deterministic' (True: no step draws random "
                "numbers; False: a step may draw)")
    return ""


def register_process(cls=None, *, replace=False):
    """Class decorator: make ``cls`` the weight process of ``weights.process = cls.name``.

    ``@register_process`` or ``@register_process(replace=True)`` (replace a process of that
    name; a name registered twice is refused otherwise, as every registry of wflow does,
    :func:`wflow.registry.register`). The class must declare ``deterministic`` (no default:
    :class:`~wflow.model.weights.WeightProcess`); ``TypeError`` naming the class otherwise.

    A process from outside wflow is found in a new interpreter (``wflow resume``, a Dask
    worker) in one of two ways: an installed package declares it in the entry-point group
    ``wflow.model.processes`` (``name = "package.module:Class"``), or the configuration names it
    by module path, ``weights.process = "package.module:Class"`` — the result file stores
    the configuration, so a resume imports it again.
    """
    def deco(c):
        problem = _undeclared(c)
        if problem:
            raise TypeError(f"register_process: {problem}")
        return register(PROCESSES, c.name, c, what="weight process", by="register_process",
                        replace=replace)

    return deco if cls is None else deco(cls)


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
                cls = ep.load()
                if PROCESSES.get(getattr(cls, "name", None)) is cls:
                    return cls  # its module registered it on import
                return register_process(cls)
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
        problem = _undeclared(cls)
        if problem:
            raise ValueError(f"process = {name!r}: {problem}")
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
                          f"process keeps D_h symmetric; allowed: {general_processes()}")
    with general_matrices():
        proc = cls.from_config(spec, H, d, dt)
    proc.symmetric = False
    return proc


def general_processes() -> str:
    """The registered processes with a form for any real D_h (``accepts_general``,
    ``model.interaction = "general"`` [model §1b]), as the allowed values of a message."""
    return choices_text(n for n, c in PROCESSES.items() if getattr(c, "accepts_general", False))


def is_deterministic(name: str, spec: dict | None = None) -> bool:
    r"""Whether ``weights.process = name`` with the ``[weights]`` table ``spec`` draws no
    random numbers (:math:`\xi_k \equiv 0`, [model §5]): the one predicate of the
    configuration's rules and of the run (adaptive steps integrate only deterministic
    weights, [model §6d]).

    .. math::

        \text{is\_deterministic}(\text{name}, \text{spec}) =
        \text{PROCESSES}[\text{name}].\text{deterministic\_for}(\text{spec})
        = \text{make\_process}(\text{spec}, \dots).\text{deterministic} .

    It is the process's declaration (``deterministic``), or, for a process whose keys decide,
    its answer for ``spec`` (OU: ``noise_var = 0``; oscillating is deterministic whatever
    ``noise_var``, which it ignores).

    Raises
    ------
    ValueError
        ``name`` is not a registered process, entry point or ``module:Class`` (naming the
        allowed values, as :func:`get_process`).
    """
    return bool(get_process(name).deterministic_for(dict(spec or {})))


def deterministic_text() -> str:
    """The deterministic processes, as the allowed values of a message: those declared
    deterministic, then those whose keys can make them so (``deterministic_when``)."""
    always = [repr(n) for n, c in PROCESSES.items() if c.deterministic]
    when = [f"{n!r} with {c.deterministic_when}" for n, c in PROCESSES.items()
            if not c.deterministic and c.deterministic_when]
    return ", ".join(always + when)
