r"""The attention field, the energy and their diagnostics [model §2–4].

.. math::
    s^h_{ij} = \beta\langle x_i, D_h x_j\rangle, \qquad
    Z_h(x_i) = \frac1n\sum_j e^{s^h_{ij}}, \qquad
    a_h(x_i) = \sum_j \pi^h_{ij} V_h x_j,

    w_h = P_{x_i} a_h \ (h\notin L), \quad w_h = P_{x_i}(V_h x_i - a_h)\ (h \in L),

    v_i = \tfrac1H\sum_h w_h\ (\text{head}), \quad
    \frac{\sum_h Z_h w_h}{\sum_h Z_h}\ (\text{joint}), \quad
    \tfrac1H\sum_h Z_h w_h\ (\text{none}).

Tokens move with :math:`\dot x_i = \sigma v_i`; the energy
:math:`E = \frac{1}{2\beta H n^2}\sum_{h,i,j} e^{s^h_{ij}}` and the gradient
:math:`g_i = P_{x_i}\frac1H\sum_h Z_h\sum_j\pi^h_{ij} D_h x_j` use the D_h of all
heads. Two backends compute the same numbers: ``"numba"`` (one fused pass over
the pairs, :mod:`wflow.kernels`) and ``"numpy"`` (dense reference,
:mod:`wflow.kernels.reference`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from dataclasses import field as dc_field

import numpy as np

from wflow.errors import ConfigError
from wflow.kernels.reference import (
    ENERGY_OUTPUTS,
    HEAD_COMBINES,
    INTERACTIONS,
    NORMALIZATIONS,
    Factored,
)
from wflow.model import spectral as _spectral
from wflow.model.spectral import SUMMATIONS
from wflow.model.sublayer import attention_update  # noqa: F401 - part of this module's API

__all__ = ["AttentionModel", "Field", "field", "energy", "attention_update", "Factored",
           "laplacian_indices", "NORMALIZATIONS", "SIGNS", "MASKS", "BACKENDS", "PRECISIONS",
           "EXPS", "INTERACTIONS", "HEAD_COMBINES", "ENERGY_OUTPUTS", "NO_ENERGY_GENERAL", "SUMMATIONS"]

# The allowed values of the model's options, defined once (wflow.config's schema imports them).
# Errors of this module are plain ValueErrors naming the parameter (``beta = 0: must be > 0``);
# the config layer maps the parameter names to configuration keys.
SIGNS = {"descent": -1.0, "ascent": 1.0}
MASKS = ("none", "causal")
BACKENDS = ("numba", "numpy")
PRECISIONS = ("float64", "float32")
EXPS = ("fast", "libm")  # the kernels' exponential: fast_exp = (exp == "fast")
#: why the energy-based quantities are refused for general D_h [model §1b]
NO_ENERGY_GENERAL = ("the energy E, its gradient, the dissipation and the energy ledger exist "
                     "only for symmetric D_h (docs/model.md §1b): with non-symmetric D_h the "
                     "field is not a gradient")


def _allowed(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name} = {value!r}: allowed values are {', '.join(map(repr, allowed))}")


def laplacian_indices(spec, H):
    """Normalise a Laplacian-head spec: a list of 0-based indices, or an int k = the last k heads."""
    if spec is None:
        return ()
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        k = int(spec)
        if not 0 <= k <= H:
            raise ValueError(f"laplacian_heads = {k}: an integer k (the last k heads) must be in 0..{H} "
                             f"(heads = {H})")
        return tuple(range(H - k, H))
    idx = tuple(sorted(int(i) for i in spec))
    if any(i < 0 or i >= H for i in idx) or len(set(idx)) != len(idx):
        raise ValueError(f"laplacian_heads = {list(spec)!r}: indices must be distinct in 0..{H - 1} "
                         f"(heads = {H})")
    return idx


@dataclass
class Field:
    r"""Field quantities for a batch of P paths [model §2–4].

    Attributes
    ----------
    velocity : (P, n, d) v (before the sign σ).
    partition : (P, H, n) Z_h(x_i).
    gradient : (P, n, d) g_i.
    b_hat : (P, n) effective mobility :math:`\hat b = 1/\bar Z`.
    energy, dissipation, G2, G2_hm, ito_sum : (P,).
    dE_dD : (P, H, d, d) :math:`\partial_{D_h}E = \frac{1}{2Hn^2}\sum_{ij} e^{s^h_{ij}} x_i x_j^T`.
    """

    velocity: np.ndarray
    partition: np.ndarray
    gradient: np.ndarray
    b_hat: np.ndarray
    energy: np.ndarray
    dissipation: np.ndarray
    G2: np.ndarray
    G2_hm: np.ndarray
    dE_dD: np.ndarray
    ito_sum: np.ndarray

    #: the :class:`~wflow.model.spectral.SpectralReport` of a spectral evaluation (degree,
    #: flagged fraction, largest indicator kept, per path) [model §2s]; None for the direct
    #: pass. Set on the instance by the spectral pass only, so that it is no field of the
    #: arrays: :meth:`paths` and :meth:`path` carry it with the paths they take.
    spectral = None

    def _arrays(self):
        return ((f.name, getattr(self, f.name)) for f in fields(self))

    def paths(self, sl: slice, copy: bool = False) -> "Field":
        """The paths ``sl`` of the batch (views, or copies that keep nothing else alive)."""
        out = type(self)(**{k: v[sl].copy() if copy else v[sl] for k, v in self._arrays()})
        if self.spectral is not None:
            out.spectral = self.spectral.paths(sl)
        return out

    def path(self, p: int) -> "Field":
        """The single-path view (leading axis dropped, scalars as float)."""
        kw = {}
        for k, v in self._arrays():
            a = v[p]
            kw[k] = float(a) if np.ndim(a) == 0 else a
        out = type(self)(**kw)
        if self.spectral is not None:
            out.spectral = self.spectral.paths(slice(p, p + 1))
        return out


@dataclass(frozen=True)
class AttentionModel:
    """The attention dynamics' static description (everything but X and D).

    Parameters
    ----------
    beta : inverse temperature β > 0.
    normalization : "head" | "joint" | "none".
    sign : "descent" (σ = −1) | "ascent" (σ = +1).
    laplacian_heads : 0-based Laplacian head indices.
    causal : causal mask (only v and the partition are defined).
    values : None (tied, V_h = D_h) or a fixed (H, d, d) array of value matrices.
    backend : "numba" | "numpy".
    fast_exp : use the kernel's polynomial exponential (numba backend).
    precision : "float64" | "float32": float32 runs the pair loop of the numba kernel in single
        precision (d = 3 with the fast exponential; sums of each 512-column chunk in float32,
        everything after in float64); the state X, D stays float64.
    interaction : "symmetric" (D_h = D_hᵀ, every quantity of §3–4) | "general" (any real D_h,
        factored or dense; the energy-based outputs are NaN) [model §1b].
    head_combine : "mean" (§2) | "sum" (the heads' outputs added, v = H·v_mean; not with
        normalization "joint") [model §1b].
    summation : "direct" (every pair) | "spectral" (S¹ and S², unmasked, float64, numba
        backend: the kernel sums by spectral summation within ``tol``) [model §2s].
    tol : the spectral summation's relative tolerance on Z and the attention average.
    max_flagged : the largest fraction of targets the spectral summation recomputes directly.
    """

    beta: float = 1.0
    normalization: str = "head"
    sign: str = "descent"
    laplacian_heads: tuple = ()
    causal: bool = False
    values: np.ndarray | None = dc_field(default=None, compare=False)
    backend: str = "numba"
    fast_exp: bool = True
    precision: str = "float64"
    interaction: str = "symmetric"
    head_combine: str = "mean"
    summation: str = "direct"
    tol: float = _spectral.TOL
    max_flagged: float = _spectral.MAX_FLAGGED

    def __post_init__(self):
        _allowed("normalization", self.normalization, NORMALIZATIONS)
        _allowed("interaction", self.interaction, INTERACTIONS)
        _allowed("head_combine", self.head_combine, HEAD_COMBINES)
        if self.head_combine == "sum" and self.normalization == "joint":
            raise ValueError("head_combine = 'sum' with normalization = 'joint': the joint "
                             "normalisation is a weighted mean of the heads by construction")
        _allowed("sign", self.sign, tuple(SIGNS))
        _allowed("backend", self.backend, BACKENDS)
        _allowed("precision", self.precision, PRECISIONS)
        if not (np.isfinite(self.beta) and self.beta > 0):
            raise ValueError(f"beta = {self.beta!r}: must be > 0")
        if self.precision == "float32" and not (self.backend == "numba" and self.fast_exp):
            raise ValueError("precision = 'float32': needs backend = 'numba' and fast_exp = True "
                             f"(got backend = {self.backend!r}, fast_exp = {self.fast_exp!r})")
        _allowed("summation", self.summation, SUMMATIONS)
        if self.summation == "spectral":
            _spectral.check(3, self.causal, self.precision, self.backend)

    @property
    def energy_defined(self) -> bool:
        """Whether E, g, 𝒟, ∂_D E and the ledger exist: symmetric D_h and no causal mask
        [model §1b, §2]."""
        return self.interaction == "symmetric" and not self.causal

    @property
    def sigma(self) -> float:
        """σ = −1 for descent, +1 for ascent."""
        return SIGNS[self.sign]

    def evaluate(self, X, D, want_ito=True, weights=None, values=None, key_bias=None,
                 radial=None) -> Field:
        """All field quantities at (X; D) for a batch: X (P, n, d), D (P, H, d, d).

        ``D`` may be a :class:`Factored` stack (A, B of shape (P, H, r, d) or (H, r, d)),
        with ``interaction = "general"``: the NumPy backend computes the logits from the
        r-dimensional projections, the numba backend from the dense product.
        ``weights``: (P, n) or (n,) point masses w_j ≥ 0 [model §5b] (every token average
        (1/n)Σ_j becomes Σ_j w_j), or None (uniform 1/n, the particle system).
        ``values``: value matrices for this call ((P, H, d, d), (H, d, d) or a
        :class:`Factored` stack), in place of the model's ``values`` (time-dependent values).
        ``key_bias``: (P, H, n) or (H, n) per-head key logit terms :math:`b_{hj}` [model §1b]
        (``interaction = "general"``), or None.
        ``radial``: None, or a (P, n) float64 array that receives the radial part
        ρ_i = ⟨x_i, u_i⟩ of the combined output before the projection [model §1c] (before
        the sign, with ``head_combine``), from the same pass (:meth:`output`)."""
        if self.summation == "spectral" and radial is None:
            return self.evaluate_spectral(X, D, weights=weights, values=values,
                                          key_bias=key_bias)[0]
        X = np.ascontiguousarray(X, dtype=float)
        general = self.interaction == "general"
        DF = D if isinstance(D, Factored) else None
        if DF is not None:
            if not general:
                raise ValueError("a Factored D needs interaction = 'general' (A_hᵀB_h is not "
                                 "symmetric in general)")
            if (self.backend == "numba" and self.precision == "float64"
                    and DF.A.shape[-2] < DF.A.shape[-1]):  # rank r < d: the projections
                return self._evaluate_factored(X, DF, weights, values, key_bias, radial)
            D = DF.dense()
            if D.ndim == 3:
                D = np.broadcast_to(D, (X.shape[0],) + D.shape)
        D = np.ascontiguousarray(D, dtype=float)
        if not general:
            check_symmetric(D)
        P, n, d = X.shape
        H = D.shape[1]
        if self.precision == "float32" and d != 3:
            raise ValueError(f"precision = 'float32': needs d = 3 (got d = {d})")
        vals = self.values if values is None else values
        VF = vals if isinstance(vals, Factored) else None
        if VF is not None:
            vals = VF.dense()
        if vals is None:
            V = D
            tied = True
        else:
            V = np.ascontiguousarray(np.broadcast_to(vals, D.shape), dtype=float)
            tied = False
        lap = np.zeros(H, dtype=bool)
        lap[list(self.laplacian_heads)] = True
        if self.backend == "numba":
            from wflow import kernels as _kernels

            Xk = X.astype(np.float32) if self.precision == "float32" else X
            out = _kernels.fused_pass(
                Xk, D, V, float(self.beta), self.normalization, lap,
                bool(self.causal), tied, want_ito=want_ito, fast_exp=self.fast_exp,
                weights=weights, interaction=self.interaction, key_bias=key_bias,
                radial=radial,
            )
            return self._combine_heads(Field(**out._asdict()), H, radial)
        from wflow.kernels.reference import field_reference

        Wb = None if weights is None else np.broadcast_to(np.asarray(weights, float), (P, n))
        KB = None if key_bias is None else np.broadcast_to(np.asarray(key_bias, float), (P, H, n))

        def path(F, p):  # path p of a Factored stack, or None
            if F is None:
                return None
            if F.A.ndim == 3:
                return F
            return Factored(F.A[p], F.B[p], F.scale)

        res = [
            field_reference(
                X[p], D[p] if DF is None else path(DF, p), self.beta, self.normalization,
                self.laplacian_heads, self.causal,
                None if tied else V[p] if VF is None else path(VF, p),
                weights=None if Wb is None else Wb[p], interaction=self.interaction,
                head_combine=self.head_combine, key_bias=None if KB is None else KB[p],
            )
            for p in range(P)
        ]
        names = Field.__dataclass_fields__.keys()
        if radial is not None:
            radial[...] = np.stack([r["radial"] for r in res])
        return Field(**{k: np.stack([np.asarray(r[k], dtype=float) for r in res]) for k in names})

    def evaluate_spectral(self, X, D, weights=None, values=None, key_bias=None):
        """The field by spectral summation [model §2s] and its
        :class:`~wflow.model.spectral.SpectralReport`: (Field, report). Arguments as
        :meth:`evaluate` (point masses ``weights`` (P, n) or (n,), w_j ≥ 0, as the direct
        pass's); key biases are refused."""
        X = np.ascontiguousarray(X, dtype=float)
        _spectral.check(X.shape[-1], self.causal, self.precision, self.backend, weights, key_bias)
        if self.interaction != "general" and not isinstance(D, Factored):
            check_symmetric(D)
        if weights is not None:
            P, n = X.shape[:2]
            w = np.asarray(weights, dtype=float)
            if w.shape not in ((n,), (1, n), (P, n)):
                raise ValueError(f"weights has shape {w.shape}: expected ({P}, {n}) or ({n},)")
            weights = np.broadcast_to(w, (P, n))
        if isinstance(D, Factored):
            D = D.dense()
        D = np.ascontiguousarray(np.broadcast_to(D, X.shape[:1] + np.shape(D)[-3:]), dtype=float)
        vals = self.values if values is None else values
        if isinstance(vals, Factored):
            vals = vals.dense()
        V = D if vals is None else np.broadcast_to(np.asarray(vals, dtype=float), D.shape)
        lap = np.zeros(D.shape[1], dtype=bool)
        lap[list(self.laplacian_heads)] = True
        out, report = _spectral.spectral_pass(X, D, V, self.beta, self.normalization, lap,
                                              self.interaction, self.head_combine, self.tol,
                                              self.max_flagged, weights)
        F = Field(**out)
        F.spectral = report
        return F, report

    def _combine_heads(self, F, H, radial=None):
        """Summed heads: Σ_h = H × (1/H)Σ_h [model §1b] (v, G², G²_hm, 𝒟 and the radial
        part ρ rescaled)."""
        if self.head_combine == "sum":
            if radial is not None:
                radial *= H
            F.velocity *= H
            F.G2 *= H * H
            F.G2_hm *= H * H
            F.dissipation *= H
        return F

    def _evaluate_factored(self, X, DF, weights, values, key_bias=None, radial=None):
        """The numba backend's factored D of rank r < d: :func:`wflow.kernels.factored.
        factored_pass` (logits and factored values from the r-dimensional projections)."""
        from wflow.kernels.factored import factored_pass

        P, n, d = X.shape
        H = DF.A.shape[-3]
        vals = self.values if values is None else values
        if vals is None:
            Vs = ("factored", DF.A, DF.B, DF.scale)
        elif isinstance(vals, Factored):
            Vs = ("factored", vals.A, vals.B, vals.scale)
        else:
            Vs = ("dense", np.broadcast_to(np.asarray(vals, dtype=float), (P, H, d, d)))
        lap = np.zeros(H, dtype=bool)
        lap[list(self.laplacian_heads)] = True
        out = factored_pass(X, DF.A, DF.B, DF.scale, Vs, float(self.beta), self.normalization,
                            lap, bool(self.causal), weights, key_bias=key_bias, radial=radial)
        return self._combine_heads(Field(**out._asdict()), H, radial)

    def kernels_ready(self, X, D) -> bool:
        """Whether :meth:`evaluate` at (X (P, n, d); D (P, H, d, d)) runs without compiling
        its numba kernels first (always True for the NumPy backend)."""
        if self.backend != "numba" or isinstance(D, Factored):  # (the factored pass: NumPy)
            return True
        from wflow import kernels as _kernels

        Xk = np.asarray(X, dtype=np.float32 if self.precision == "float32" else float)
        return _kernels.kernels_ready(Xk, np.asarray(D, dtype=float), float(self.beta),
                                      self.fast_exp, None, bool(self.causal))

    def evaluate_pair(self, X, Da, Db, want_ito=(False, True)) -> tuple[Field, Field]:
        """The fields at (X; Da) and at (X; Db), ``want_ito`` for each: X (P, n, d), Da and Db
        (P, H, d, d).

        When both batches take the symmetric d = 3 pass
        (:func:`wflow.kernels.takes_sym_pass`) they are evaluated as one batch of 2P
        paths: one pool job and one call instead of two, with the same bits as two
        calls (the pass's paths are independent and it skips the Itô loop path by path).
        Otherwise two calls. The run loop evaluates the ledger's (X_{k+1}; D_k) and the next
        step's (X_{k+1}; D_{k+1}) this way: the second field is a copy, so that it does not keep
        the first (views of the joint arrays) alive after the step."""
        from wflow import kernels as _kernels

        X = np.asarray(X, dtype=float)
        Da = np.asarray(Da, dtype=float)
        Db = np.asarray(Db, dtype=float)
        P = X.shape[0]
        if (self.backend == "numba" and self.precision == "float64" and self.fast_exp
                and not self.causal and Da.shape == Db.shape):
            X2 = np.concatenate([X, X])
            D2 = np.concatenate([Da, Db])
            # every condition of the symmetric pass holds for both batches iff for the two as one
            if _kernels.takes_sym_pass(X2, D2, self.beta):
                ito = np.repeat(np.array([bool(w) for w in want_ito]), P)
                F = self.evaluate(X2, D2, want_ito=ito)
                return F.paths(slice(0, P)), F.paths(slice(P, 2 * P), copy=True)
        return (self.evaluate(X, Da, want_ito=want_ito[0]),
                self.evaluate(X, Db, want_ito=want_ito[1]))

    def velocity(self, X, D, weights=None) -> np.ndarray:
        """σ-free velocity v (P, n, d) (stages of the integrators)."""
        return self.evaluate(X, D, want_ito=False, weights=weights).velocity

    def output(self, X, D, weights=None, values=None, key_bias=None):
        r"""The combined attention output before the tangent projection [model §1c],

        .. math::
            u_i = \sum_h c_h\, o_h(x_i) = v_i + \rho_i x_i,\qquad
            \rho_i = \langle x_i, u_i\rangle,

        from one field evaluation at (X; D): the numba backend forms ρ from the row sums of
        the pass that gives v (cost :math:`H n d^2` per path on top of the pass's
        :math:`H n^2 d`; every route), the NumPy backend from its dense reference. A subclass
        whose :meth:`evaluate` does not take ``radial`` does not serve it.

        Parameters
        ----------
        X, D, weights, values, key_bias : as in :meth:`evaluate`.

        Returns
        -------
        v : (P, n, d) the tangent part, the velocity (before the sign σ).
        rho : (P, n) the radial part ρ (before the sign σ; with ``head_combine``).
        """
        X = np.ascontiguousarray(X, dtype=float)
        rho = np.empty(X.shape[:2])
        F = self.evaluate(X, D, want_ito=False, weights=weights, values=values,
                          key_bias=key_bias, radial=rho)
        return F.velocity, rho


def _as_batch(X, D, general=False):
    X = np.asarray(X, dtype=float)
    D = np.asarray(D, dtype=float)
    if X.ndim != 2:
        raise ConfigError(f"X has shape {X.shape}: expected (n, d)")
    n, d = X.shape
    if D.ndim == 2:
        D = D[None]
    if D.ndim != 3 or D.shape[1:] != (d, d):
        raise ConfigError(f"D has shape {D.shape}: expected (H, {d}, {d}) for tokens of dimension {d}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(D))):
        raise ConfigError("X and D must be finite")
    if np.max(np.abs(np.linalg.norm(X, axis=1) - 1.0)) > 1e-8:
        raise ConfigError("X: every token must lie on the unit sphere (use wflow.geometry.sphere.normalize)")
    if not general:
        check_symmetric(D)
    return X[None], D[None]


def check_symmetric(D) -> None:
    r"""Refuse a D (..., d, d) with :math:`\max\lvert D_h - D_h^T\rvert > 10^{-10}\max(1,
    \max\lvert D\rvert)` under ``interaction = "symmetric"``: the symmetric pass and every
    quantity of [model §3–4] assume it, and a non-symmetric D would give a wrong field silently."""
    D = np.asarray(D)
    if D.size and (np.max(np.abs(D - np.swapaxes(D, -1, -2)))
                   > 1e-10 * max(1.0, float(np.max(np.abs(D))))):
        raise ConfigError("D: every D_h must be symmetric (docs/model.md §1), or pass "
                          "interaction='general' (no energy then, §1b); use values= for general V_h")


def field(X, D, beta=1.0, normalization="head", laplacian_heads=(), mask="none", values=None,
          backend="numba", fast_exp=True, interaction="symmetric", head_combine="mean",
          summation="direct", tol=_spectral.TOL, max_flagged=_spectral.MAX_FLAGGED, report=False):
    r"""The attention field v of [model §2] and every diagnostic of §3–4 at (X; D).

    Parameters
    ----------
    X : (n, d) tokens on :math:`S^{d-1}`.
    D : (H, d, d) symmetric interaction matrices (or (d, d) for one head).
    beta : inverse temperature β.
    normalization : "head" | "joint" | "none".
    laplacian_heads : list of 0-based indices, or an int k (the last k heads).
    mask : "none" | "causal".
    values : None (tied) or (H, d, d) value matrices.
    interaction : "symmetric" | "general" (any real D_h; the energy-based outputs are NaN)
        [model §1b].
    head_combine : "mean" | "sum" [model §1b].
    summation : "direct" (every pair) | "spectral" (d = 2 or 3: the kernel sums by spectral
        summation, within ``tol`` of the direct sums at every target) [model §2s].
    tol : relative tolerance of the spectral summation on Z and the attention average.
    max_flagged : the largest fraction of targets the spectral summation recomputes directly
        (beyond it: :class:`~wflow.errors.NumericalError`).
    report : also return the :class:`~wflow.model.spectral.SpectralReport` (spectral only).

    Returns
    -------
    Field with ``velocity`` (n, d), ``partition`` (H, n), ``gradient`` (n, d), ``b_hat`` (n,),
    ``energy``, ``dissipation``, ``G2``, ``G2_hm``, ``ito_sum`` (floats), ``dE_dD`` (H, d, d).
    Energy-based fields are NaN under the causal mask. With ``report=True``: (Field, report).
    """
    _allowed("interaction", interaction, INTERACTIONS)
    Xb, Db = _as_batch(X, D, general=(interaction == "general"))
    H = Db.shape[1]
    _allowed("mask", mask, MASKS)
    V = None if values is None else np.asarray(values, dtype=float).reshape(Db.shape[1:])
    _allowed("summation", summation, SUMMATIONS)
    if report and summation != "spectral":
        raise ValueError("report = True: needs summation = 'spectral'")
    model = AttentionModel(
        beta=float(beta), normalization=normalization, laplacian_heads=laplacian_indices(laplacian_heads, H),
        causal=(mask == "causal"), values=V, backend=backend, fast_exp=fast_exp,
        interaction=interaction, head_combine=head_combine, summation=summation, tol=float(tol),
        max_flagged=float(max_flagged),
    )
    if summation == "spectral":
        F, rep = model.evaluate_spectral(Xb, Db)
        return (F.path(0), rep) if report else F.path(0)
    return model.evaluate(Xb, Db).path(0)


def energy(X, D, beta=1.0) -> float:
    r""":math:`E(X; D) = \frac{1}{2\beta H n^2}\sum_h\sum_{i,j}\exp(\beta\langle x_i, D_h x_j\rangle)`.

    Symmetric D_h only: a non-symmetric D_h is a ConfigError saying why [model §1b]."""
    D = np.asarray(D, dtype=float)
    Dh = D[None] if D.ndim == 2 else D
    if Dh.ndim == 3 and Dh.shape[1] == Dh.shape[2] and np.all(np.isfinite(Dh)) and (
            np.max(np.abs(Dh - Dh.transpose(0, 2, 1))) > 1e-10 * max(1.0, np.max(np.abs(Dh)))):
        raise ConfigError(f"energy of a non-symmetric D: {NO_ENERGY_GENERAL}")
    return field(X, D, beta=beta).energy
