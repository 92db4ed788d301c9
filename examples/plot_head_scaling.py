r"""
Head scaling of the strong upper gradient
=========================================

The paper's Section 6 figure :ref:`[model §9] <model-section-9>`: the late-window mean of
the strong upper gradient

.. math::

    \overline{G^2}(H) = \frac{2}{T}\int_{T/2}^{T} G^2(t)\,dt, \qquad
    G^2 = \frac1n\sum_i \frac{|v_i|^2}{\bar m(x_i)}, \qquad
    \overline{G^2}(H) \approx a\,H^{b},

against the number of heads H. With Ornstein–Uhlenbeck weights
:math:`dD = \lambda(M - D)\,dt + g\,dW_{\mathrm{sym}}` the heads are independent and their
average field shrinks like :math:`1/\sqrt H`, so :math:`b \approx -1`; with oscillating
weights of one shared phase every head is the same matrix and :math:`b \approx 0`.

The published setting is n = 200 tokens on S², β = 1, Δt = 5·10⁻³, T = 20, H ∈ {1, 10,
100} (``wflow study section6``). Here a quick size: T = 2 and 4 OU paths, enough for the
exponents to show.
"""

import matplotlib.pyplot as plt
import numpy as np

import wflow

heads = [1, 3, 10, 30, 100]
T = 2.0
base = {"model": {"n": 200, "d": 3, "beta": 1.0},
        "solver": {"T": T, "dt": 0.005, "paths": 4},
        "diagnostics": {"ledger": False, "clustering": False},
        "output": {"store_tokens": False}}
families = {
    "OU": {"weights": {"process": "ou"}},
    "oscillating (shared phase)": {"weights": {"process": "oscillating", "phase": "shared"},
                                   "solver": {"paths": 1}},
}


def late_G2(res):
    """The late-window (t >= T/2) mean of G², one value per Monte Carlo path."""
    late = res.t >= res.t[-1] / 2
    return res.G2[late].mean(axis=0)


fig, ax = plt.subplots(figsize=(5.5, 4))
for label, extra in families.items():
    means = []
    for H in heads:
        cfg = {sec: {**base.get(sec, {}), **extra.get(sec, {})} for sec in {*base, *extra}}
        cfg["model"] = {**cfg["model"], "heads": H}
        means.append(late_G2(wflow.simulate(cfg)).mean())
    b, log_a = np.polyfit(np.log(heads), np.log(means), 1)
    line = ax.loglog(heads, means, "o", label=f"{label}: b = {b:.2f}")[0]
    ax.loglog(heads, np.exp(log_a) * np.asarray(heads, float) ** b, "-", color=line.get_color())
    print(f"{label:<28} late G² = {np.round(means, 4)}  fit a·H^b: b = {b:.3f}")

ax.set_xlabel("heads H")
ax.set_ylabel(r"late-window mean $G^2$")
ax.set_title(f"n = 200 on S², T = {T:g} (quick size)")
ax.legend()
fig.tight_layout()
