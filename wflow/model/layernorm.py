r"""Layer-norm placements: the attention output before projection and its radial part
[model §1c].

.. math::
    u_i = \sum_h c_h\, o_h(x_i), \qquad v_i = P_{x_i} u_i, \qquad
    \rho_i = \langle x_i, u_i\rangle, \qquad u_i = v_i + \rho_i x_i,

with :math:`o_h = a_h` (attention head) or :math:`V_h x_i - a_h` (Laplacian head) and
:math:`c_h` the head weights of ``normalization`` and ``head_combine`` [model §2, §1b]. The
placements move the tokens with :math:`\dot x_i = \sigma v_i / s_i`: :math:`s_i = 1` (post),
:math:`r_i` (pre), :math:`r_i\lvert u_i\rvert` (peri), :math:`\lvert u_i\rvert/\alpha` (nGPT);
pre-LN and peri-LN carry the radius :math:`r_i` of the residual stream,
:math:`\dot r_i = \sigma\rho_i` (pre) or :math:`\sigma\rho_i/\lvert u_i\rvert` (peri).

:func:`output` and :func:`radial` take :math:`v` and :math:`\rho` from one field evaluation
(:meth:`~wflow.model.attention.AttentionModel.output`: the numba pass forms :math:`\rho` from
its row sums at a cost of :math:`H n d^2` per path), so a placement's stage costs one pass,
as post-LN's; :func:`radial_reference` is the dense NumPy twin they are tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PLACEMENTS", "RADIUS_PLACEMENTS", "Placement", "radial", "radial_reference",
           "output"]

#: model.layernorm: the allowed placements [model §1c]; "post" is the flow of §2
PLACEMENTS = ("post", "pre", "peri", "mix", "ngpt")
#: the placements whose state includes the radius r_i of the residual stream
RADIUS_PLACEMENTS = ("pre", "peri", "mix")


def radial(model, X, D) -> np.ndarray:
    r""":math:`\rho_i = \langle x_i, u_i\rangle` (P, n): the radial part of the combined
    attention output before the tangent projection [model §1c], for the attention model
    ``model`` at X (P, n, d), D (P, H, d, d), from one field evaluation
    (:meth:`~wflow.model.attention.AttentionModel.output`). Before the sign σ."""
    return model.output(X, D)[1]


def radial_reference(model, X, D) -> np.ndarray:
    r""":func:`radial` from dense (H, n, n) softmax arrays in NumPy, path by path (the twin
    of the kernels' :math:`\rho`; cost :math:`H n^2 d` per path): for the attention model
    ``model`` (its β, normalization, head_combine, Laplacian heads, mask and values) at
    X (P, n, d), D (P, H, d, d) (dense). Before the sign σ, like the velocity."""
    from wflow.kernels.reference import _apply, _logits

    X = np.asarray(X, dtype=float)
    D = np.asarray(D, dtype=float)
    P, n, d = X.shape
    H = D.shape[1]
    lap = np.zeros(H, dtype=bool)
    lap[list(model.laplacian_heads)] = True
    allowed = np.tril(np.ones((n, n), dtype=bool)) if model.causal else None
    out = np.empty((P, n))
    for p in range(P):
        S = _logits(X[p], D[p], float(model.beta))  # (H, n, n)
        if allowed is not None:
            S = np.where(allowed, S, -np.inf)
        rowmax = S.max(axis=2, keepdims=True)
        W = np.exp(S - rowmax)
        rowsum = W.sum(axis=2, keepdims=True)
        Pi = W / rowsum
        vals = model.values
        V = D[p] if vals is None else vals if not isinstance(vals, np.ndarray) else (
            vals[p] if vals.ndim == 4 else vals)
        VX = _apply(V, X[p])  # V_h x_j (H, n, d)
        A = np.einsum("hij,hja->hia", Pi, VX)
        O = np.where(lap[:, None, None], VX - A, A)
        rho_h = np.einsum("hia,ia->hi", O, X[p])  # (H, n)
        if model.normalization == "head":
            r = rho_h.mean(axis=0)
        else:
            Z = np.exp(rowmax[..., 0]) * rowsum[..., 0] / n  # (H, n)
            r = ((Z * rho_h).sum(axis=0) / Z.sum(axis=0) if model.normalization == "joint"
                 else (Z * rho_h).sum(axis=0) / H)
        out[p] = H * r if model.head_combine == "sum" else r
    return out


def output(model, X, D, v=None) -> np.ndarray:
    r""":math:`u = v + \rho x` (P, n, d), the combined attention output before the tangent
    projection and before the sign, v and ρ from one field evaluation
    (:meth:`~wflow.model.attention.AttentionModel.output`); ``v`` the velocity at (X; D) if
    already known (the same numbers as the evaluation's)."""
    v1, rho = model.output(X, D)
    return (v1 if v is None else v) + rho[..., None] * np.asarray(X, dtype=float)


@dataclass(frozen=True)
class Placement:
    r"""A layer-norm placement [model §1c]: ``name`` in :data:`PLACEMENTS`, nGPT's step size
    ``alpha`` ∈ (0, 1] and Mix-LN's switch time ``switch`` :math:`t_s \ge 0`."""

    name: str = "post"
    alpha: float = 0.2
    switch: float = 5.0

    def __post_init__(self):
        if self.name not in PLACEMENTS:
            raise ValueError(f"layernorm = {self.name!r}: allowed values are "
                             f"{', '.join(map(repr, PLACEMENTS))}")
        if not (np.isfinite(self.alpha) and 0 < self.alpha <= 1):
            raise ValueError(f"ngpt_alpha = {self.alpha!r}: must be in (0, 1]")
        if not (np.isfinite(self.switch) and self.switch >= 0):
            raise ValueError(f"mix_switch = {self.switch!r}: must be >= 0")

    @property
    def has_radius(self) -> bool:
        """Whether the state includes the radii r_i of the residual stream."""
        return self.name in RADIUS_PLACEMENTS

    def at(self, t: float, dt: float) -> str:
        """The placement in force for the step starting at ``t``: Mix-LN is post-LN for the
        steps with :math:`t_k < t_s` and pre-LN after (``t`` compared on the step grid)."""
        if self.name != "mix":
            return self.name
        return "post" if t < self.switch - 1e-9 * dt else "pre"
