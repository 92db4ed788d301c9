r"""Weight processes: the time-dependent interaction matrices :math:`D_h(t)` [model §5] — the
protocol (:class:`WeightProcess`), the initial weights and the weight files; the registry and
the built-in processes are :mod:`wflow.model.processes` (one file each).

Every process has a drift :math:`f(D, t)` and advances the weights of ``P``
Monte Carlo paths by one step,

.. math::

    D_{k+1} = D_k + f(D_k, t_k)\,\Delta t + \xi_k ,

where :math:`\xi_k` is the realised noise increment (``noise_increment``).

Shapes: the weights of one path are ``(H, d, d)`` (symmetric, heads 0-based);
batched over paths they are ``(P, H, d, d)``. A stochastic step draws for path
``p`` only from ``rngs[p]`` (one call per step per path), so the result of a
path does not depend on how paths are batched.

Symmetry of input weights is checked within a relative tolerance
``SYM_RTOL = 1e-10`` of the largest absolute entry of the whole array, and the
array is then symmetrised as :math:`(A + A^T)/2`; inside :func:`general_matrices`
(``model.interaction = "general"`` [model §1b]) any real matrices are taken as they are.
"""

from __future__ import annotations

import contextlib
import contextvars
import os

import numpy as np

from wflow.errors import ConfigError

__all__ = [
    "SYM_RTOL",
    "initial_weights",
    "check_weights",
    "load_weight_file",
    "WeightProcess",
    "general_matrices",
    "GENERAL_INITIAL_WEIGHTS",
    "GPT2_STD",
]

SYM_RTOL = 1e-10
INITIAL_WEIGHTS = ("symmetric_gaussian", "identity", "file", "gaussian", "goe", "gpt2")
#: the initial weights that are not symmetric: model.interaction = "general" only [model §1b]
GENERAL_INITIAL_WEIGHTS = ("gaussian", "gpt2")
#: std of the entries of the "gpt2" initialisation (GPT-2's initializer_range)
GPT2_STD = 0.02
LAYER_WEIGHTS = ("identity", "symmetric_gaussian")  # a layer's weights: one of these or a file
WEIGHT_FILE_SUFFIXES = (".npz", ".h5", ".hdf5")

# --------------------------------------------------------------------------- validation


#: whether weight inputs may be any real matrices (model.interaction = "general")
_GENERAL = contextvars.ContextVar("wflow_general_matrices", default=False)


@contextlib.contextmanager
def general_matrices(general=True):
    """Within the block, weight inputs (files, arrays, layers) are any real d×d matrices,
    checked for shape and finiteness but neither for symmetry nor symmetrised [model §1b]
    (``general=False``: the symmetric contract, as outside)."""
    token = _GENERAL.set(bool(general))
    try:
        yield
    finally:
        _GENERAL.reset(token)


def _sym(A):
    """Symmetric part over the last two axes, :math:`(A + A^T)/2` (exact for symmetric A)."""
    return (A + np.swapaxes(A, -1, -2)) / 2


def _validated(A, name, ndims=(3,), H=None, d=None):
    """Numeric, shape (..., H, d, d), finite, symmetric within SYM_RTOL; symmetrised copy."""
    if np.iscomplexobj(A):
        raise ConfigError(f"{name}: complex values: weights must be real numbers")
    try:
        A = np.array(A, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: not a numeric array: weights must be real numbers") from None
    want = "(H, d, d)" if ndims == (3,) else "(H, d, d) or (K, H, d, d)"
    ok = A.ndim in ndims and A.shape[-1] == A.shape[-2] >= 2
    ok = ok and (H is None or A.shape[-3] == H) and (d is None or A.shape[-1] == d)
    if not ok:
        sizes = f" with H = {H if H is not None else 'any'}, d = {d if d is not None else 'any'}"
        raise ConfigError(f"{name}: shape {A.shape}: expected {want}{sizes} (d >= 2)")
    if not np.all(np.isfinite(A)):
        raise ConfigError(f"{name}: contains NaN or inf: all entries must be finite")
    if _GENERAL.get():  # any real matrices [model §1b]
        return A
    scale = float(np.max(np.abs(A)))
    asym = float(np.max(np.abs(A - np.swapaxes(A, -1, -2))))
    if asym > SYM_RTOL * scale:
        raise ConfigError(
            f"{name}: not symmetric: max|A - A^T| = {asym:.3g} exceeds "
            f"{SYM_RTOL:g} * max|A| = {SYM_RTOL * scale:.3g} (model.interaction = 'general' "
            "takes non-symmetric matrices)"
        )
    return _sym(A)


def check_weights(A, H=None, d=None, name="weights"):
    r"""Validate one weight set and return a symmetrised float copy.

    .. math::

        A \mapsto (A + A^T)/2 \quad\text{if}\quad
        \max|A - A^T| \le 10^{-10} \max|A| .

    Parameters
    ----------
    A : array_like, shape (H, d, d)
        Interaction matrices, one per head; real and finite.
    H, d : int, optional
        Expected number of heads and dimension (not checked when None).
    name : str
        Field name used in error messages.

    Returns
    -------
    numpy.ndarray, shape (H, d, d)
        A new float64 array, exactly symmetric.

    Raises
    ------
    ConfigError
        Wrong shape, non-numeric, non-finite or non-symmetric input (one line naming ``name``).
    """
    return _validated(A, name, (3,), H, d)


def _number(x, field, minimum=0.0, strict=False):
    """A finite float >= minimum (> minimum if ``strict``; no bound if minimum is None)."""
    bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"
    allowed = "finite numbers" + bound
    v = float("nan")
    if not isinstance(x, bool):
        try:
            v = float(x)
        except (TypeError, ValueError):
            pass
    if not np.isfinite(v) or (minimum is not None and (v < minimum or (strict and v == minimum))):
        raise ConfigError(f"{field} = {x!r}: allowed values are {allowed}")
    return v


def _choice(x, field, allowed, aliases=None):
    x = (aliases or {}).get(x, x)
    if x not in allowed:
        raise ConfigError(f"{field} = {x!r}: allowed values are {', '.join(allowed)}")
    return x


def _batch(D, H=None, d=None):
    """Weights of P paths as a float array of shape (P, H, d, d)."""
    D = np.asarray(D, dtype=float)
    if D.ndim != 4 or (H is not None and D.shape[1] != H) or (d is not None and D.shape[-1] != d):
        raise ValueError(f"weights of shape {D.shape}: expected (P, H, d, d) with H={H}, d={d}")
    return D


# --------------------------------------------------------------------------- initial weights, files


def initial_weights(kind, H, d, rng, given=None):
    r"""Initial interaction matrices :math:`D_h(0)`, one set shared by all paths.

    .. math::

        \text{symmetric\_gaussian: } D_h(0) = \Xi_h + \Xi_h^T,\ \Xi_h \text{ iid } N(0, 1);
        \qquad \text{identity: } D_h(0) = I ;

        \text{gaussian: } \Xi_h/\sqrt d;\qquad
        \text{goe: } (\Xi_h + \Xi_h^T)/\sqrt{2d};\qquad
        \text{gpt2: } 0.02\,\Xi_h \quad [\text{model §1b}].

    Parameters
    ----------
    kind : {"symmetric_gaussian", "identity", "given", "file", "gaussian", "goe", "gpt2"}
        ``symmetric_gaussian`` draws ``rng.standard_normal((H, d, d))`` (this draw
        order, as the reference simulation), and so do ``gaussian``, ``goe`` and ``gpt2``;
        ``given``/``file`` validate ``given`` with :func:`check_weights`. ``gaussian`` and
        ``gpt2`` are not symmetric (``model.interaction = "general"``).
    H, d : int
        Number of heads and dimension.
    rng : numpy.random.Generator
        Used only by the random kinds.
    given : array_like of shape (H, d, d), or str or os.PathLike, optional
        The weights, or a weight file (:func:`load_weight_file`; of a trajectory
        ``(K, H, d, d)`` the first set is used).

    Returns
    -------
    numpy.ndarray, shape (H, d, d)
        Symmetric float64 weights. Var of a diagonal entry is 4, of an off-diagonal 2
        for ``symmetric_gaussian``.
    """
    if kind == "symmetric_gaussian":
        X = rng.standard_normal((H, d, d))
        return X + X.transpose(0, 2, 1)
    if kind == "identity":
        return np.tile(np.eye(d), (H, 1, 1))
    if kind in ("gaussian", "goe", "gpt2"):
        X = rng.standard_normal((H, d, d))
        if kind == "gaussian":
            return X / np.sqrt(d)
        if kind == "goe":
            return (X + X.transpose(0, 2, 1)) / np.sqrt(2 * d)
        return GPT2_STD * X
    if kind in ("given", "file"):
        if given is None:
            raise ConfigError(f"init.weights = {kind!r}: needs the weights (array or file path)")
        name = "init.weights"
        if isinstance(given, (str, os.PathLike)):
            name = f"{given}: key 'D'"
            given = load_weight_file(given)["D"]
            given = given[0] if given.ndim == 4 else given
        return check_weights(given, H, d, name=name)
    raise ConfigError(
        f"init.weights = {kind!r}: allowed values are symmetric_gaussian, identity, given, file, "
        "gaussian, goe, gpt2"
    )


def load_weight_file(path, key=None):
    r"""Read weights from an NPZ or HDF5 file (inputs are data: no pickling).

    .. math::

        D \in \mathbb{R}^{H\times d\times d} \ \text{(one set)} \quad\text{or}\quad
        D \in \mathbb{R}^{K\times H\times d\times d},\ t \in \mathbb{R}^K \ \text{(trajectory)}.

    Parameters
    ----------
    path : str or os.PathLike
        ``.npz`` (read with ``allow_pickle=False``) or ``.h5``/``.hdf5``; key/dataset
        ``"D"`` of shape (H, d, d) or (K, H, d, d), optional ``"t"`` of shape (K,)
        (strictly increasing; shape (1,) for a single set).
    key : str, optional
        The configuration key that names the file (``"init.weights_file"``): every error
        starts with ``key = 'path'``.

    Returns
    -------
    dict
        ``{"D": ndarray, "t": ndarray or None}``; ``D`` is checked for finiteness and
        symmetry (within ``SYM_RTOL``) and symmetrised.

    Raises
    ------
    ConfigError
        Any problem, one line naming the file and the key.
    """
    from wflow.storage.io import read_arrays

    where = str(path) if key is None else f"{key} = {str(path)!r}"
    raw = read_arrays(path, ("D", "t"), what="weight file", where=where)
    if "D" not in raw:
        raise ConfigError(
            f"{where}: key 'D' missing: expected a dataset 'D' of shape (H, d, d) or (K, H, d, d)"
        )
    for k, v in raw.items():
        if v.dtype.kind not in "biuf":
            raise ConfigError(f"{where}: key {k!r} has dtype {v.dtype}: expected real numbers")
    D = _validated(raw["D"], f"{where}: key 'D'", (3, 4))
    t = None
    if "t" in raw:
        t = np.asarray(raw["t"], dtype=float)
        K = D.shape[0] if D.ndim == 4 else 1
        if t.shape != (K,):
            raise ConfigError(f"{where}: key 't' has shape {t.shape}: expected ({K},) to match 'D'")
        if not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
            raise ConfigError(f"{where}: key 't': values must be finite and strictly increasing")
    return {"D": D, "t": t}


# --------------------------------------------------------------------------- the protocol


class WeightProcess:
    r"""Base class and protocol of the weight processes [model §5].

    .. math::

        D_{k+1} = D_k + f(D_k, t_k)\,\Delta t + \xi_k .

    A process declares, in one place (its class): its config name ``name``, the
    ``[weights]`` keys it reads (``params``: :class:`wflow.params.Param` rows with bare names —
    default, constraint, one-line doc, cross-key rule; the configuration table reads them from
    the registered classes), how it is built from them (:meth:`from_config`), its initial
    weights (:meth:`initial`), its drift, its step, its realised noise, and its expected Itô
    rate (:meth:`ito_rate`). The run loop names no process.

    Attributes
    ----------
    name : str
        The ``weights.process`` value.
    params : tuple of wflow.params.Param
        The ``[weights]`` keys this process reads (a key of another process set explicitly to
        a value other than its default is refused). A plain dict name -> default is also
        read (the constraint then follows the type of the default).
    ignores : tuple of str
        Keys of other processes this one accepts and ignores (none but ``noise_var`` of the
        deterministic oscillating process, which configurations state as 0).
    deterministic : bool
        Declared by every process, no default (:func:`~wflow.model.processes.register_process`
        refuses a class without it): True when no step draws random numbers, whatever the
        keys; False when a step may draw, :math:`\xi \ne 0` (a process whose keys decide, as
        OU's ``noise_var``, declares False and answers per table in :meth:`deterministic_for`;
        its instances then carry the answer for their keys). Adaptive steps integrate only
        deterministic weights [model §6d].
    deterministic_when : str
        For a process declared stochastic whose keys can make it deterministic: the condition,
        in the words of the configuration (OU: ``"weights.noise_var = 0"``); "" otherwise.
    accepts_general : bool
        The process has a form for any real D_h (``model.interaction = "general"``
        [model §1b]); :func:`~wflow.model.processes.make_process` refuses the others then.
    symmetric : bool
        The process keeps D_h symmetric (True) or steps general matrices (False: set by
        ``make_process(..., interaction="general")``).
    """

    name = "base"
    params: tuple = ()
    ignores: tuple = ()
    deterministic: bool  # declared by each process: no default [model §5]
    deterministic_when = ""
    accepts_general = False
    symmetric = True

    @classmethod
    def from_config(cls, spec: dict, H: int, d: int, dt: float):
        """Build the process from the validated ``[weights]`` table (keys of :attr:`params`)."""
        return cls()

    @classmethod
    def deterministic_for(cls, spec: dict) -> bool:
        r"""Whether the process built from the ``[weights]`` table ``spec`` draws no random
        numbers, :math:`\xi_k \equiv 0` (the ``deterministic`` of
        ``cls.from_config(spec, ...)``): the declared :attr:`deterministic`, unless a process
        whose keys decide overrides this (OU: ``noise_var = 0``)."""
        return cls.deterministic

    def initial(self, D0):
        """:math:`D(0)` given the drawn initial weights ``D0`` (P, H, d, d): ``D0`` itself,
        unless the process prescribes its own trajectory."""
        return D0

    def ito_rate(self, beta, ito_sum):
        r"""Expected Itô rate of the energy per path, from the kernel's ``ito_sum`` (P,):
        0 for a process without Brownian noise."""
        return np.zeros(np.shape(ito_sum))

    @property
    def needs_ito(self) -> bool:
        """Whether :meth:`ito_rate` uses ``ito_sum`` (the kernel then computes it)."""
        return False

    def drift(self, D, t):
        r"""Drift :math:`f(D, t)`, same shape as ``D`` ((H, d, d) or (P, H, d, d))."""
        raise NotImplementedError

    def step(self, D, t, dt, rngs=None):
        r"""Advance ``D`` (P, H, d, d) from ``t`` to ``t + dt``; a new, exactly symmetric array.

        ``rngs`` is a list of P generators (path p draws only from ``rngs[p]``);
        deterministic processes ignore it (None allowed).
        """
        raise NotImplementedError

    def noise_increment(self, D, D_next, t, dt):
        r"""Realised noise increment of a step produced by :meth:`step`.

        .. math::

            \xi = D_{\text{next}} - D - f(D, t)\,\Delta t .

        Parameters
        ----------
        D, D_next : numpy.ndarray, shape (P, H, d, d)
            Weights at ``t`` and ``t + dt``.
        t, dt : float
        """
        D = np.asarray(D, dtype=float)
        return np.asarray(D_next, dtype=float) - D - self.drift(D, t) * dt

    def describe(self):
        """JSON-able parameters, for provenance."""
        return {"process": self.name}
