r"""
The exact energy identity
=========================

Over a run the energy change telescopes, with no approximation, into a weight part and a
token part :ref:`[model §6] <model-section-6>`:

.. math::

    E(X_K; D_K) - E(X_0; D_0)
    = \sum_k \big[E(X_{k+1}; D_{k+1}) - E(X_{k+1}; D_k)\big]
    + \sum_k \big[E(X_{k+1}; D_k) - E(X_k; D_k)\big].

wflow records both sums (``weight_work``, ``token_work``) and their round-off check
``ledger_telescoping`` :math:`= E - E_0 - \text{weight part} - \text{token part}`. By the
chain rule the token part equals :math:`\sigma\int\mathcal D\,dt`, the dissipation
:math:`\mathcal D = \frac1n\sum_i\langle g_i, v_i\rangle`, up to the integrator's error:
the ledger residual

.. math::

    R = \sum_k \big[E(X_{k+1}; D_k) - E(X_k; D_k)\big]
      - \sigma\sum_k \Delta t\,\frac{\mathcal D(X_k; D_k) + \mathcal D(X_{k+1}; D_k)}{2}

tends to zero at order :math:`\min(p, 2)` for a scheme of order p. Here: deterministic
oscillating weights (shared phase), H = 10, n = 50 on S², T = 0.4 (``wflow study energy``
runs T = 2).
"""

import matplotlib.pyplot as plt
import numpy as np

import wflow

base = {"model": {"n": 50, "heads": 10},
        "weights": {"process": "oscillating", "phase": "shared", "scheme": "euler"},
        "solver": {"T": 0.4, "paths": 1},
        "diagnostics": {"ledger": True, "clustering": False}}

# %%
# The ledger closes to round-off
# ------------------------------
res = wflow.simulate({**base, "solver": {**base["solver"], "method": "heun", "dt": 0.01}})
dE = res.energy[:, 0] - res.energy[0, 0]
print("max |E - E0 - weight part - token part| =", np.abs(res.ledger_telescoping).max())

fig, ax = plt.subplots(figsize=(5.5, 3.6))
ax.plot(res.t, dE, "k", lw=3, alpha=0.4, label="E(t) − E(0)")
ax.plot(res.t, res.weight_work[:, 0], label="weight part")
ax.plot(res.t, res.token_work[:, 0], label="token part")
ax.plot(res.t, res.weight_work[:, 0] + res.token_work[:, 0], "k--", label="weight + token")
ax.set_xlabel("t")
ax.legend()
ax.set_title("Heun, Δt = 0.01")
fig.tight_layout()

# %%
# The residual R converges at order min(p, 2)
# --------------------------------------------
dts = np.array([0.02, 0.01, 0.005, 0.0025])
fig, ax = plt.subplots(figsize=(5.5, 3.6))
for method in ("euler", "heun", "rk4"):
    R = []
    for dt in dts:
        r = wflow.simulate({**base, "solver": {**base["solver"], "method": method, "dt": dt}})
        R.append(abs(r.ledger_residual[-1, 0]))
    order = np.polyfit(np.log(dts), np.log(R), 1)[0]
    ax.loglog(dts, R, "o-", label=f"{method}: order {order:.2f}")
    print(f"{method:<6} |R(T)| = {np.array2string(np.array(R), precision=2)}  order {order:.2f}")
ax.set_xlabel("Δt")
ax.set_ylabel("|ledger residual R(T)|")
ax.legend()
fig.tight_layout()
