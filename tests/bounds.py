r"""Rounding-error bounds for comparing two floating-point evaluations of the field.

Every comparison of a numba result with the NumPy reference (or with the companion case,
computed by the paper's own code) goes through :func:`field_bounds` and
:func:`assert_within`. Neither side is exact: both sum in an order chosen by the compiler,
the BLAS or NumPy's SIMD loops, and both exponentials are a few ulps off (NumPy's own
``exp`` changes with the vector width). So the tolerance is not a fixed number but a bound
derived from the conditioning of each quantity:

* **Error of a nested sum.** A quantity computed as nested sums (over columns j in a row,
  then over rows i, heads h and coordinates a) of products of a few factors has a
  forward error of at most :math:`\gamma_N \sum |\text{terms}|` with
  :math:`\gamma_N \approx N u` (Higham, *Accuracy and Stability*, §4.2, applied level by
  level), where u is the unit round-off and N the length of the longest accumulation chain,
  here :math:`N \le 2n + H + 2d + 16` (a row sum, the sum over rows, the heads, two
  d-term dot products and a fixed number of products, divisions and the projection).
  The magnitude that multiplies it is the sum of the *absolute values* of the terms, not
  the result: for the dissipation :math:`\mathcal D = \frac1n\sum_i\langle g_i, v_i\rangle`,
  whose terms cancel, it is :math:`\frac1n\sum_i |g_i||v_i|` (plus the propagated errors of g
  and v); for the tangent projection :math:`P_x a = a - \langle a, x\rangle x` of a vector
  a ≈ x (clustered tokens) it is |a|, not the tiny |P_x a|.
* **Error of an exponential.** A logit :math:`s = \beta\langle x_i, D x_j\rangle - c` is a
  d-term dot product minus a shift, so its absolute error is at most
  :math:`2(d + 2)\,u\,s_{\max}` with :math:`s_{\max} = \beta\max_h\|D_h\|_2`; ``exp`` turns
  an absolute error of its argument into the same *relative* error of its value, and adds
  its own few ulps (:data:`EXP_ULPS`: the polynomial exponential of ``wflow.kernels`` is
  within 4.7e-16 relative, NumPy's SIMD ``exp`` within 4 ulp by its documentation).

:func:`field_bounds` returns, for each output of ``wflow.kernels.reference.field_reference``,
an absolute bound :math:`\varepsilon\,M` where ε is the relative bound above and M the
magnitude of the terms, read from the reference's own outputs (partition functions,
norms of D and V). :data:`SAFETY` covers the small constants the counting above does not
track. A wrong kernel misses these bounds by many orders of magnitude; rounding cannot
exceed them on any vector width.
"""

from __future__ import annotations

import numpy as np

U64 = np.finfo(np.float64).eps / 2  # unit round-off of float64, 1.1e-16
U32 = np.finfo(np.float32).eps / 2  # of float32, 6.0e-8
EXP_ULPS = 8  # the exponential's own error, in units of u (polynomial ≤ 4.3 u, NumPy ≤ 4 ulp)
SAFETY = 4  # constants the counting does not track (a few products per term, both sides err)

FIELD_NAMES = ("velocity", "partition", "gradient", "b_hat", "energy", "dissipation", "G2",
               "G2_hm", "dE_dD", "ito_sum")
MASKED_DEFINED = ("velocity", "partition")


def relative_bound(n, d, H, beta, D, u=U64):
    r"""ε: the relative error bound of one nested pair sum (see the module docstring).

    .. math:: \varepsilon = S\,u\,\big(E + 2(d+2)\,\beta\max_h\|D_h\|_2 + 2n + H + 2d + 16\big)
    """
    smax = beta * float(np.max(np.linalg.norm(np.asarray(D, float), 2, axis=(-2, -1))))
    return SAFETY * u * (EXP_ULPS + 2 * (d + 2) * smax + 2 * n + H + 2 * d + 16)


def field_bounds(X, D, beta, normalization="head", laplacian_heads=(), V=None, causal=False, ref=None,
                 u=U64, weights=None, masked=None):
    r"""Absolute error bounds for every field quantity of one path.

    Parameters
    ----------
    X : (n, d) tokens; D : (H, d, d) weights; V : (H, d, d) values or None (tied).
    causal : the velocity is the masked one (its weights use the masked partition).
    ref : the reference's unmasked outputs (``field_reference``) for the magnitudes;
        computed if None.
    u : unit round-off of the arithmetic compared (``U32`` for the float32 pair loop).
    weights : (n,) point masses [model §5b] or None (1/n): the row sums become weighted sums.
    masked : under ``causal``, the reference's masked outputs (for the masked partition);
        computed if None.

    Returns
    -------
    dict name → bound, broadcastable against the quantity: per row ``(n, 1)`` for
    ``velocity`` and ``gradient``, per entry for ``partition`` and ``b_hat``, per head
    ``(H, 1, 1)`` for ``dE_dD``, a scalar for the sums.
    """
    from wflow.kernels.reference import field_reference

    X = np.asarray(X, float)
    D = np.asarray(D, float)
    n, d = X.shape
    H = D.shape[0]
    Vm = D if V is None else np.asarray(V, float)
    if ref is None:
        ref = field_reference(X, D, beta, normalization, laplacian_heads, False, V, weights)
    wr = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, float)  # row weights
    lap = np.zeros(H, bool)
    lap[list(laplacian_heads)] = True
    eps = relative_bound(n, d, H, beta, D, u)

    Z = ref["partition"]  # (H, n), positive: no cancellation
    if causal and masked is None:
        masked = field_reference(X, D, beta, normalization, laplacian_heads, True, V, weights)
    Zv = masked["partition"] if causal else Z
    normV = np.linalg.norm(Vm, 2, axis=(1, 2))  # |a_h| ≤ ‖V_h‖₂ (a convex combination of V x_j)
    normD = np.linalg.norm(D, 2, axis=(1, 2))
    weight = {"head": np.full_like(Zv, 1.0 / H), "joint": Zv / Zv.sum(axis=0),
              "none": Zv / H}[normalization]
    # v_i: Σ_h c_h w_h with |w_h| ≤ (1 + [Laplacian]) ‖V_h‖₂, projected (another |w_h|)
    Mv = 2 * np.einsum("hi,h->i", weight, (1 + lap) * normV)
    # g_i = P_x (1/H) Σ_h Z_h Σ_j π_ij D_h x_j
    Mg = 2 * np.einsum("hi,h->i", Z, normD) / H
    v = _rownorm(ref["velocity"])
    g = _rownorm(ref["gradient"])
    m_bar = (1.0 / Z).mean(axis=0)
    b_hat = ref["b_hat"]
    return {
        "velocity": eps * Mv[:, None],
        "partition": eps * Zv,
        "gradient": eps * Mg[:, None],
        "b_hat": eps * b_hat,
        "energy": eps * abs(ref["energy"]),
        # ⟨g_i, v_i⟩: the propagated errors of g and v, and the sum of |terms|
        "dissipation": eps * (wr @ (Mg * v + g * Mv + g * v)),
        "G2": eps * (wr @ ((2 * v * Mv + v * v) / m_bar)),
        "G2_hm": eps * (wr @ ((2 * v * Mv + v * v) / b_hat)),
        # ∂E/∂D_h = (1/2Hn²) Σ_ij e_ij x_i x_jᵀ: entries bounded by (1/2Hn) Σ_i Z_h(x_i)
        # (weighted: (1/2H) Σ_i w_i Z_h(x_i))
        "dE_dD": eps * ((Z @ wr) / (2 * H))[:, None, None],
        "ito_sum": eps * abs(ref["ito_sum"]),  # positive terms
    }


def _rownorm(A):
    """Row norms without overflow (g carries Z, up to ~e^500)."""
    s = np.max(np.abs(A), axis=-1, keepdims=True)
    s = np.where(s > 0, s, 1.0)
    return s[..., 0] * np.linalg.norm(A / s, axis=-1)


def assert_within(name, got, want, bound):
    """|got − want| ≤ bound, row-wise for (n, d) vectors, elementwise otherwise; the message
    names the quantity and the worst ratio error / bound."""
    got = np.asarray(got, float)
    want = np.asarray(want, float)
    bound = np.asarray(bound, float)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    rel = np.abs(got - want) / bound  # divided first: Z and g can be ~e^500, their squares overflow
    if name.split("[")[0].split(" ")[0] in ("velocity", "gradient"):
        rel = np.linalg.norm(rel, axis=-1)  # row-wise, the bound is per token
    ratio = float(np.max(rel)) if rel.size else 0.0
    assert np.array_equal(np.isfinite(got), np.isfinite(want)), f"{name}: non-finite entries differ"
    assert ratio <= 1.0, f"{name}: error exceeds its bound by a factor {ratio:.3g}"
    return float(ratio)


def assert_field_close(got, ref, bounds, names=FIELD_NAMES):
    """Every named quantity of ``got`` (mapping or attributes) within its bound of ``ref``."""
    worst = 0.0
    for name in names:
        a = got[name] if isinstance(got, dict) else getattr(got, name)
        worst = max(worst, assert_within(name, a, ref[name], bounds[name]))
    return worst
