r"""The weight processes [model §5]: the registry and the built-in processes, one file each.

.. math::

    D_{k+1} = D_k + f(D_k, t_k)\,\Delta t + \xi_k .

A process is one class (protocol :class:`wflow.model.weights.WeightProcess`) in one file,
declaring its ``weights.process`` name, its ``[weights]`` keys (``params``: default,
constraint, doc, rule) and its mathematics; :func:`register_process` makes it the process of
``weights.process = cls.name``, and the configuration table reads its keys from the registry.
Adding a built-in process is its file and one registration line at the bottom of this module.
"""

from __future__ import annotations

from wflow.errors import ConfigError
from wflow.model.weights import WeightProcess

__all__ = ["PROCESSES", "ENTRY_POINT_GROUP", "register_process", "get_process", "make_process",
           "Frozen", "OrnsteinUhlenbeck", "DrivenOU", "brownian_increments", "Oscillating",
           "Layers", "FromFile", "PHASES", "TARGETS"]

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
            cls = getattr(import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"process = {name!r}: cannot import it ({exc})") from None
        if not (isinstance(cls, type) and issubclass(cls, WeightProcess)):
            raise ValueError(f"process = {name!r}: not a WeightProcess subclass")
        PROCESSES.setdefault(name, cls)
        return cls
    raise ValueError(f"process = {name!r}: allowed values are {', '.join(PROCESSES)} "
                     "or 'module:Class'")


def make_process(spec, H, d, dt):
    r"""Build the weight process of a ``[weights]`` table [model §10].

    .. math::

        \text{process} \in
        \{\text{frozen}, \text{ou}, \text{oscillating}, \text{layers}, \text{file}\}.

    Parameters
    ----------
    spec : dict
        Keys: ``process`` (default "frozen"); for ``ou``: ``rate`` (1), ``mean`` (None = I),
        ``noise_var`` (2), ``scheme`` ("euler_maruyama" | "exact"; "euler" accepted as
        an alias); for ``oscillating``: ``phase`` ("shared" | "spread"), ``scheme``
        ("euler" | "exact"; "euler_maruyama" accepted as an alias); for ``layers``:
        ``layers``, a list of ``{"duration": float, "weights": "identity" |
        "symmetric_gaussian" | path | array, "seed": int}`` — ``symmetric_gaussian``
        draws :math:`\Xi + \Xi^T` from ``np.random.default_rng(seed)`` (the seed is
        required); for ``file``: ``file``, a path read by :func:`load_weight_file`
        (without ``t`` a trajectory is one set per step, :math:`t_k = k\,\Delta t`).
        Other keys are ignored.
    H, d : int
        Number of heads and dimension.
    dt : float
        Time step (layer rounding, default file times).

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
    return cls.from_config(spec, H, d, dt)


# The built-in processes: one registration line each (their keys come with their classes).
from wflow.model.processes.file import FromFile  # noqa: E402
from wflow.model.processes.frozen import Frozen  # noqa: E402
from wflow.model.processes.layers import Layers  # noqa: E402
from wflow.model.processes.oscillating import PHASES, TARGETS, Oscillating  # noqa: E402
from wflow.model.processes.ou import DrivenOU, OrnsteinUhlenbeck, brownian_increments  # noqa: E402

register_process(Frozen)
register_process(OrnsteinUhlenbeck)
register_process(Oscillating)
register_process(Layers)
register_process(FromFile)
