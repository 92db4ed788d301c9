r"""Minimizing-movement (JKO) steps on :math:`(S^{d-1})^n` [model §7].

Knows nothing about attention: a step needs the energy and its Riemannian
gradient as a callback, and a frozen mobility b. One step of length τ solves

.. math::
    X_{k+1} = \operatorname*{argmin}_{Y}\; -\sigma E(Y) + \frac{1}{2\tau}\,\frac1n
    \sum_i \frac{d_S(x_i, y_i)^2}{b(x_i)},

parametrised by tangent vectors through the exponential map,
:math:`y_i = \exp_{x_i}(U_i)`, :math:`U_i = P_{x_i} u_i`, so that
:math:`d_S(x_i, y_i) = |U_i|` (for :math:`|U_i| < \pi`), and minimised with
L-BFGS (scipy) with the analytic gradient. The first-order optimality condition
:math:`U_i = \sigma\tau\, b_i\, n\,\nabla_{y_i}E` gives back the explicit flow
:math:`\dot x = \sigma v` whenever :math:`v_i = b_i g_i` (joint with b = b̂, none
with b = 1, head with H = 1).

The optimisation starts from the better of U = 0 and the explicit step
:math:`U = \sigma\tau b g`, so the JKO inequality
:math:`-\sigma E(X_{k+1}) + \mathrm{cost}/(2\tau) \le -\sigma E(X_k)` holds at every step.
"""

from __future__ import annotations

import numpy as np

from wflow.geometry import sphere
from wflow.params import Integer, Interval, Param, When, declare, error
from wflow.stepping.registry import StepContext, register_series, register_stepper

__all__ = ["JKO", "exp_map_vjp", "JKO_SERIES"]

#: the per-record statistics of the last JKO step (series of the run's result)
JKO_SERIES = tuple(register_series(n, d) for n, d in (
    ("jko_iterations", "L-BFGS iterations of the last JKO step"),
    ("jko_converged", "1 if the last JKO step converged"),
    ("jko_objective_drop", "objective decrease of the last JKO step (per token)"),
    ("jko_w2", "W2 between X_k and X_{k+1} of the last JKO step"),
    ("jko_identity", "1 if the optimal coupling of the last JKO step is the identity"),
))


def exp_map_vjp(X, U, G):
    r"""Pull back a cotangent G at :math:`Y = \exp_X(U)` to U (rows, shape (n, d)).

    With :math:`r = |U|`, :math:`Y = \cos r\,x + \frac{\sin r}{r} U` and

    .. math::
        \nabla_U = \operatorname{sinc}(r)\,G + \Big[-\operatorname{sinc}(r)\langle x, G\rangle
        + \frac{r\cos r - \sin r}{r^3}\langle U, G\rangle\Big] U .
    """
    r = np.linalg.norm(U, axis=-1)
    sinc = np.sinc(r / np.pi)
    small = r < 1e-4
    rs = np.where(small, 1.0, r)
    c = np.where(small, -1.0 / 3.0 + r**2 / 30.0, (rs * np.cos(rs) - np.sin(rs)) / rs**3)
    xg = np.einsum("...a,...a->...", X, G)
    ug = np.einsum("...a,...a->...", U, G)
    return sinc[..., None] * G + (-sinc * xg + c * ug)[..., None] * U


class JKO:
    """The JKO step as a solver object (first order: ``order = 1``).

    Parameters
    ----------
    tol : gradient tolerance of L-BFGS (on the objective scaled by n).
    maxiter : iteration cap per step.
    check_coupling : compute W₂ between X_k and X_{k+1} (POT, geodesic cost) and
        whether the optimal coupling is the identity (O(n³); skipped above ``max_n``).
    """

    order = 1
    sde_order = None  # a deterministic minimising movement: no token noise [model §6b]
    name = "jko"
    series = JKO_SERIES

    def __init__(self, tol=1e-10, maxiter=200, check_coupling=True, max_n=2000):
        self.tol = float(tol)
        self.maxiter = int(maxiter)
        self.check_coupling = check_coupling
        self.max_n = max_n

    def step_one(self, energy_grad, X, b, tau, sigma):
        r"""One JKO step for one path.

        Parameters
        ----------
        energy_grad : callable Y (n, d) -> (E, G) with G (n, d) the Riemannian gradient
            :math:`\nabla_{y_i} E` (tangent at Y).
        X : (n, d) current tokens. b : (n,) frozen mobility. tau : step τ. sigma : ±1.

        Returns
        -------
        Y (n, d), info dict (iterations, converged, objective_drop, cost, w2, identity).
        """
        n, d = X.shape
        # objective scaled by n (better conditioned): J n = −σ n E + Σ|U|²/(2τ b)
        def J(u):
            U = sphere.project(X, u.reshape(n, d))
            Y = sphere.exp_map(X, U)
            E, G = energy_grad(Y)
            cost = np.sum(np.sum(U * U, axis=1) / b) / (2 * tau)
            val = -sigma * n * E + cost
            gU = exp_map_vjp(X, U, -sigma * n * G) + U / (tau * b[:, None])
            return val, sphere.project(X, gU).ravel()

        J0, g0 = J(np.zeros(n * d))
        # explicit warm start U = σ τ b n ∇E = σ τ b g
        u_exp = -(tau * b[:, None]) * g0.reshape(n, d)  # g0 = -σ n G at U = 0
        Je, _ = J(u_exp.ravel())
        u0 = u_exp.ravel() if Je < J0 else np.zeros(n * d)
        from scipy.optimize import minimize  # here: 0.7 s of import for every process otherwise

        res = minimize(J, u0, jac=True, method="L-BFGS-B",
                       options={"maxiter": self.maxiter, "gtol": self.tol, "ftol": 1e-15,
                                "maxcor": 20})
        u = res.x if res.fun <= min(J0, Je) else u0
        U = sphere.project(X, u.reshape(n, d))
        Y = sphere.exp_map(X, U)
        cost = float(np.sum(np.sum(U * U, axis=1) / b) / n)
        info = {
            "iterations": float(res.nit),
            # L-BFGS may stop at round-off in the line search: accept when the Newton estimate
            # of the remaining displacement, |∇J| τ b, is below sqrt(tol)
            "converged": float(bool(res.success)
                               or np.max(np.abs(res.jac)) * tau * np.max(b) <= np.sqrt(self.tol)),
            "objective_drop": float((J0 - min(res.fun, J0, Je)) / n),
            "cost": cost,
            "w2": np.nan,
            "identity": np.nan,
        }
        if self.check_coupling and n <= self.max_n:
            from wflow.model.diagnostics import w2_geodesic

            w2, plan = w2_geodesic(X, Y, return_plan=True)
            info["w2"] = w2
            info["identity"] = float(np.allclose(np.diag(plan) * n, 1.0, atol=1e-9))
        return Y, info

    def step(self, ctx: StepContext):
        """The :class:`~wflow.stepping.registry.Stepper` protocol, batched over paths: ``ctx.X``
        (P, n, d), ``ctx.mobility`` (P, n), ``ctx.energy_grad(p, Y)``.

        Returns X' (P, n, d) and a dict of (P,) arrays named :data:`JKO_SERIES`.
        """
        X, b = ctx.X, ctx.mobility
        P = X.shape[0]
        out = np.empty_like(X)
        keys = [name.removeprefix("jko_") for name in JKO_SERIES]
        info = {name: np.empty(P) for name in JKO_SERIES}
        for p in range(P):
            out[p], inf = self.step_one(lambda Y, p=p: ctx.energy_grad(p, Y), X[p], b[p],
                                        ctx.dt, ctx.sigma)
            for k, name in zip(keys, JKO_SERIES):
                info[name][p] = inf[k]
        return out, info


@register_stepper("jko", doc="JKO minimising movement of E in W₂ (order 1, [model §7])",
                 stages=1)
def _jko_from_config(solver_config: dict) -> JKO:
    return JKO(tol=solver_config.get("jko_tol", 1e-10),
               maxiter=solver_config.get("jko_maxiter", 200),
               max_n=solver_config.get("max_pairwise_n", 2000))


# ------------------------------------------------------------------ configuration keys


def _energy_rule(cfg):
    """JKO minimises the energy [model §7]: refused where none exists (the causal mask,
    general interactions, [model §1b])."""
    m, method = cfg["model"], cfg["solver"]["method"]
    if method != "jko":
        return
    if m["mask"] == "causal":
        raise error(f"solver.method = {method!r} with model.mask = 'causal': "
                    "energy-based methods are refused under the causal mask")
    if m["interaction"] == "general":
        from wflow.model.attention import NO_ENERGY_GENERAL

        raise error(f"solver.method = {method!r} with model.interaction = 'general': "
                    f"{NO_ENERGY_GENERAL}")


declare(
    Param("solver.jko_tol", 1e-10, Interval(0, None, "neither"), "JKO: L-BFGS gradient tolerance",
          applies=When("solver.method", "jko"), rule=_energy_rule),
    Param("solver.jko_maxiter", 200, Integer(lo=1), "JKO: L-BFGS iterations per step",
          applies=When("solver.method", "jko")),
    after="solver.exp")
