r"""Escape times of the metastability study by collapsing converged clusters [model §6d,
"Escape time", "Collapsing converged clusters"].

The field of :mod:`wflow.studies.metastability` (one head, :math:`D = V = I`, head
normalisation, ascent) is a function of position, so tokens at one point move together for
all time. A cluster whose tokens have all come within :math:`\delta` of each other
(:math:`1 - \langle x_i, x_j\rangle \le \delta`) is replaced by one token of mass
:math:`m_k` (its number of tokens), and the K weighted tokens :math:`y_k` follow

.. math:: \dot y_k = P_{y_k} \frac{\sum_l m_l e^{\beta\langle y_k, y_l\rangle} y_l}
                                  {\sum_l m_l e^{\beta\langle y_k, y_l\rangle}}

(:func:`weighted_field`; the masses are key weights, logit biases :math:`\log m_l`). The
reduced system has no contraction inside the clusters, so an adaptive step is set by the slow
motion of the clusters and not by the stability of the in-cluster contraction.

:func:`escape_time` integrates one system this way from its n unit tokens (all of mass 1, the
full system) with scipy's DOP853 and terminal events: two weighted tokens come within δ (they
merge into one token at their normalised mass-weighted mean); a pair of weighted tokens
crosses the merge cosine upwards or downwards (the merged fraction changes). A pair that has
just crossed is counted on its new side and left out of the crossing events until it is
10⁻¹⁰ away from the merge cosine (one more event), so that a pair touching the cosine
tangentially cannot make events of zero length.
The merged fraction of the reduced state,

.. math:: f = \frac{\sum_{k, l:\ \langle y_k, y_l\rangle > c} m_k m_l - n}{n(n-1)},
          \qquad c = 0.999,

counts every pair i ≠ j of the full system (a token's own pair k = l contributes
:math:`m_k^2`, of which :math:`m_k` are the i = j terms), and τ is the first crossing time at
which it reaches 1/2. Collapsing at δ moves a token by :math:`O(\sqrt{\delta})`; the
δ-sensitivity of τ is checked in the tests and on the page.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["weighted_field", "merged_fraction", "escape_time", "study_tokens", "DELTA"]

#: the default collapse threshold: two tokens are merged when 1 − ⟨y_k, y_l⟩ ≤ DELTA
DELTA = 1e-13


def weighted_field(Y, m, beta):
    r"""The field of K weighted tokens (ascent, head normalisation, :math:`D = V = I`).

    .. math:: v_k = P_{y_k} \frac{\sum_l m_l e^{\beta\langle y_k, y_l\rangle} y_l}
                                 {\sum_l m_l e^{\beta\langle y_k, y_l\rangle}},
              \qquad P_y u = u - \langle y, u\rangle y .

    Parameters
    ----------
    Y : (K, d) array, unit rows
    m : (K,) array, positive masses (integers for a collapsed system)
    beta : float

    Returns
    -------
    (K, d) array; with ``m`` all ones it is the full field of the metastability study.

    Notes
    -----
    The rows are normalised before the field is evaluated, so the field is tangent to the
    sphere through each :math:`y_k` and :math:`|y_k|` is conserved exactly: the sphere is
    neutral for an integrator in :math:`\mathbb{R}^{Kd}`. (With :math:`P_y u = u - \langle
    y, u\rangle y` off the sphere, :math:`|y|` relaxes to 1 at a rate
    :math:`2\langle y, v\rangle \approx 2`, a stiff mode that would bound an explicit step
    at a few time units.)
    """
    Y = np.asarray(Y, dtype=float)
    Y = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    L = beta * (Y @ Y.T) + np.log(np.asarray(m, dtype=float))[None, :]
    L -= L.max(axis=1, keepdims=True)
    W = np.exp(L)
    W /= W.sum(axis=1, keepdims=True)
    V = W @ Y
    return V - np.sum(V * Y, axis=1, keepdims=True) * Y


def _one_minus_cos(Y):
    """1 − ⟨y_k, y_l⟩ as |y_k − y_l|²/2 (no cancellation for close unit vectors)."""
    diff = Y[:, None, :] - Y[None, :, :]
    return 0.5 * np.einsum("kld,kld->kl", diff, diff)


def merged_fraction(Y, m, merge_cosine=0.999, above=None):
    r"""The merged fraction of the full system from its reduced state (module docstring).

    ``above`` (K, K) bool, if given, is the set of pairs counted as merged (the event
    bookkeeping of :func:`escape_time`); else it is :math:`1 - \langle y_k, y_l\rangle <
    1 - c`, with every k = l counted."""
    m = np.asarray(m, dtype=float)
    n = m.sum()
    if above is None:
        above = _one_minus_cos(np.asarray(Y, float)) < 1.0 - merge_cosine
        np.fill_diagonal(above, True)
    return float((m @ above.astype(float) @ m - n) / (n * (n - 1)))


def _merge(Y, m, k, l):
    y = m[k] * Y[k] + m[l] * Y[l]
    y /= np.linalg.norm(y)
    keep = [i for i in range(len(m)) if i not in (k, l)]
    return np.vstack([Y[keep], y[None]]), np.concatenate([m[keep], [m[k] + m[l]]])


def escape_time(X0, beta, *, delta=DELTA, T=1e8, rtol=1e-10, atol=1e-12, merge_cosine=0.999,
                threshold=0.5, collapse=True, max_events=100000):
    r"""The half-merge time of one system, collapsing clusters as they converge.

    Parameters
    ----------
    X0 : (n, d) array, the unit tokens at t = 0
    beta : float
    delta : float, two tokens merge when :math:`1 - \langle y_k, y_l\rangle \le \delta`
    T : float, the censoring time
    rtol, atol : float, DOP853's tolerances (scipy ``solve_ivp``)
    merge_cosine, threshold : the merged fraction counts pairs with cosine > ``merge_cosine``;
        τ is the first time it is ≥ ``threshold``
    collapse : bool, False integrates the full system (no merging; the reference)

    Returns
    -------
    dict with ``tau`` (inf when censored at T), ``t_collapsed`` (the time of the last merge
    before τ; NaN without a merge), ``masses`` (of the tokens at the end), ``Y`` (the tokens
    at the end), ``nfev`` (field evaluations), ``segments`` (integrations between events).
    """
    from scipy.integrate import solve_ivp

    Y = np.array(X0, dtype=float)
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    n, d = Y.shape
    m = np.ones(n)
    gap = 1.0 - merge_cosine
    t, nfev, seg, t_coll = 0.0, 0, 0, math.nan
    # pairs that have just crossed the merge cosine: (k, l) -> counted as merged or not; they
    # are not watched for crossings until they leave the band |1 − cos − (1 − c)| < band
    forced = {}
    band = 1e-10

    while seg < max_events:
        K = len(m)
        iu = np.triu_indices(K, 1)
        omc = _one_minus_cos(Y)
        above = omc < gap
        np.fill_diagonal(above, True)
        free = np.ones(len(iu[0]), dtype=bool)
        for (k, l), state in forced.items():
            above[k, l] = above[l, k] = state
            free[np.flatnonzero((iu[0] == k) & (iu[1] == l))] = False
        if merged_fraction(Y, m, above=above) >= threshold:
            return dict(tau=t, t_collapsed=t_coll, masses=m, Y=Y, nfev=nfev, segments=seg)
        up_set = ~above[iu] & free      # pairs below the merge cosine: watch them cross upwards
        down_set = above[iu] & free     # pairs above it: watch them fall back
        band_set = ~free

        def rhs(_t, z, m=m, K=K):
            return weighted_field(z.reshape(K, d), m, beta).ravel()

        def ev_up(_t, z, K=K, iu=iu, s=up_set):
            if not s.any():
                return -1.0
            return gap - float(np.min(_one_minus_cos(z.reshape(K, d))[iu][s]))

        def ev_down(_t, z, K=K, iu=iu, s=down_set):
            if not s.any():
                return 1.0
            return gap - float(np.max(_one_minus_cos(z.reshape(K, d))[iu][s]))

        def ev_leave(_t, z, K=K, iu=iu, s=band_set):
            if not s.any():
                return -1.0
            return float(np.max(np.abs(_one_minus_cos(z.reshape(K, d))[iu][s] - gap))) - band

        def ev_merge(_t, z, K=K, iu=iu):
            if K < 2:
                return 1.0
            return float(np.min(_one_minus_cos(z.reshape(K, d))[iu])) - delta

        for ev in (ev_up, ev_down, ev_leave, ev_merge):
            ev.terminal = True
        ev_up.direction, ev_down.direction, ev_leave.direction = 1.0, -1.0, 1.0
        ev_merge.direction = -1.0
        events = [ev_up, ev_down, ev_leave] + ([ev_merge] if collapse and K > 1 else [])
        sol = solve_ivp(rhs, (t, T), Y.ravel(), method="DOP853", rtol=rtol, atol=atol,
                        events=events)
        nfev += sol.nfev
        seg += 1
        if sol.status != 1:  # reached T
            Y = sol.y[:, -1].reshape(K, d)
            return dict(tau=math.inf, t_collapsed=t_coll, masses=m, Y=Y, nfev=nfev, segments=seg)
        which = [i for i, te in enumerate(sol.t_events) if len(te)]
        i_ev = min(which, key=lambda i: sol.t_events[i][0])
        t = float(sol.t_events[i_ev][0])
        Y = sol.y_events[i_ev][0].reshape(K, d).copy()
        Y /= np.linalg.norm(Y, axis=1, keepdims=True)
        omc = _one_minus_cos(Y)[iu]
        if i_ev == 3:  # merge the closest pair, then every pair within δ
            forced = {}
            first = True
            while len(m) > 1:
                o = _one_minus_cos(Y)
                np.fill_diagonal(o, np.inf)
                k, l = np.unravel_index(np.argmin(o), o.shape)
                if not first and o[k, l] > delta:
                    break
                Y, m = _merge(Y, m, k, l)
                t_coll, first = t, False
        elif i_ev in (0, 1):  # a pair crossed the merge cosine: it is now on the other side
            s = up_set if i_ev == 0 else down_set
            j = np.flatnonzero(s)[np.argmin(omc[s]) if i_ev == 0 else np.argmax(omc[s])]
            forced[(int(iu[0][j]), int(iu[1][j]))] = i_ev == 0
        else:  # a pair left the band: its state is read from its cosine again
            j = np.flatnonzero(band_set)[np.argmax(np.abs(omc[band_set] - gap))]
            forced.pop((int(iu[0][j]), int(iu[1][j])), None)
    raise RuntimeError(f"escape_time: more than {max_events} events before t = {t:g}")


def study_tokens(d, beta, paths, scale="full"):
    """The initial tokens (paths, n, d) of the metastability study's cell (d, β): system p is
    the study's system p (its per-path token stream), so the times are comparable."""
    from wflow.engine.initial import draw
    from wflow.studies import StudyOptions, get_study
    from wflow.studies.metastability import cell_name

    tasks = dict(get_study("metastability").tasks(StudyOptions(scale=scale)))
    cfg = tasks[cell_name(d, beta)]
    cfg["solver"]["paths"] = int(paths)
    return draw(cfg).X0
