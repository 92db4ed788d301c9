"""The ``laplacian`` study and what it needs: the value choices −I and random symmetric, the
ANOVA split of a batch of sequences, Laplacian heads with V = λI, one weight path for every
path, tokens around class centres; and the paper's oscillating forcing for d ≥ 4."""

import numpy as np
import pytest
from conftest import random_case, small_config

import wflow
from wflow.config import resolve
from wflow.engine.run import Simulation
from wflow.errors import ConfigError
from wflow.model.diagnostics import ANOVA_PARTS, anova_split
from wflow.model.processes import Oscillating


# ---------------------------------------------------------------------------------- ANOVA
@pytest.mark.parametrize("seed", range(4))
def test_anova_parts_add_up_to_the_total(seed):
    """total = within + between sequence + between class, to 1e-12 relative, for unequal
    class sizes, a shifted cloud (so the sums cancel) and leading (record) axes."""
    rng = np.random.default_rng(seed)
    P, n, d = 7 + seed, 5 + 3 * seed, 2 + seed
    labels = rng.integers(0, 3, P)
    X = 4.0 + rng.standard_normal((3, P, n, d)) * rng.uniform(0.1, 2, (1, P, 1, 1))
    a = anova_split(X, labels)
    parts = sum(a[p] for p in ANOVA_PARTS)
    assert a["total"].shape == (3,)
    np.testing.assert_array_less(np.abs(parts - a["total"]), 1e-12 * a["total"])
    assert all(np.all(a[p] >= 0) for p in ANOVA_PARTS)


def test_anova_analytic_case():
    """Two classes with centres ±e_0, sequences at exactly their class centre with tokens
    ±s e_1 about it: within = s², between sequence = 0, between class = 1."""
    s = 0.3
    seq = np.array([[0.0, s], [0.0, -s]])
    X = np.stack([seq + [1.0, 0.0], seq + [1.0, 0.0], seq + [-1.0, 0.0], seq + [-1.0, 0.0]])
    a = anova_split(X, ["a", "a", "b", "b"])
    assert a["within_sequence"] == pytest.approx(s**2, rel=1e-14)
    assert a["between_sequence"] == pytest.approx(0.0, abs=1e-15)
    assert a["between_class"] == pytest.approx(1.0, rel=1e-14)
    # moving one sequence of class a by +δ e_1 and the other by −δ: between sequence
    # = (δ² + δ²)/P = δ²/2, the class means stay
    X[0] += [0.0, 0.1]
    X[1] -= [0.0, 0.1]
    b = anova_split(X, [0, 0, 1, 1])
    assert b["between_sequence"] == pytest.approx(0.005, rel=1e-12)
    assert b["between_class"] == pytest.approx(1.0, rel=1e-14)


def test_anova_refuses_bad_labels():
    with pytest.raises(ValueError, match="labels"):
        anova_split(np.zeros((3, 4, 2)), [0, 1])


# --------------------------------------------------------------------- V = λI equivalence
@pytest.mark.parametrize("lam", [1.0, -0.5])
def test_laplacian_head_with_scalar_values_is_attention_head_with_minus_values(backend, lam):
    """A Laplacian head with V = λI equals an attention head with V = −λI (P_x x = 0), head
    by head: mixing the two kinds changes nothing else."""
    X, D = random_case(n=11, d=4, H=4, seed=3)
    L = [1, 3]
    V = np.broadcast_to(lam * np.eye(4), (4, 4, 4)).copy()
    Fl = wflow.field(X, D, values=V, laplacian_heads=L, backend=backend)
    W = V.copy()
    W[L] = -W[L]
    Fa = wflow.field(X, D, values=W, backend=backend)
    np.testing.assert_allclose(Fl.velocity, Fa.velocity, rtol=0, atol=1e-14)
    # and it is not the identity map: the Laplacian heads do change the field
    assert np.max(np.abs(Fl.velocity - wflow.field(X, D, values=V, backend=backend).velocity)) > 1e-3


def test_run_all_laplacian_minus_identity_equals_attention_identity():
    """The runs (every head Laplacian, V = −I) and (no Laplacian head, V = +I) coincide."""
    base = small_config(**{"model.values": "minus_identity", "model.laplacian_heads": 3,
                           "diagnostics.ledger": False})
    a = wflow.simulate(base)
    b = wflow.simulate(small_config(**{"model.values": "identity", "model.laplacian_heads": 0,
                                       "diagnostics.ledger": False}))
    c = wflow.simulate(small_config(**{"model.values": "identity", "model.laplacian_heads": 3,
                                       "diagnostics.ledger": False}))
    np.testing.assert_allclose(a.X, b.X, rtol=0, atol=1e-13)
    assert np.max(np.abs(a.X[-1] - c.X[-1])) > 1e-3


# ---------------------------------------------------------------------------- value choices
def test_values_minus_identity_and_symmetric_gaussian():
    H, d = 40, 6
    s = Simulation(small_config(**{"model.values": "minus_identity", "model.heads": H,
                                   "model.d": d}))
    np.testing.assert_array_equal(s.values, -np.broadcast_to(np.eye(d), (H, d, d)))
    g = Simulation(small_config(**{"model.values": "symmetric_gaussian", "model.heads": H,
                                   "model.d": d})).values
    np.testing.assert_array_equal(g, g.transpose(0, 2, 1))
    # (Ξ + Ξᵀ)/√(2d): E V_aa² = 2/d (H d samples), E V_ab² = 1/d (H d(d−1)/2 samples); 5 SE
    diag = np.einsum("haa->ha", g) ** 2
    iu = np.triu_indices(d, 1)
    off = g[:, iu[0], iu[1]] ** 2
    for sq, m in ((diag, 2 / d), (off, 1 / d)):  # Var of a squared N(0, m) is 2 m²
        assert abs(sq.mean() - m) < 5 * np.sqrt(2 * m**2 / sq.size)
    # the draw differs from the non-symmetric gaussian choice and is seeded by init.seed
    g2 = Simulation(small_config(**{"model.values": "symmetric_gaussian", "model.heads": H,
                                    "model.d": d, "init.seed": 8})).values
    assert not np.allclose(g, g2)


def test_values_choices_errors():
    with pytest.raises(ConfigError, match="model.values"):
        resolve(small_config(**{"model.values": "minus"}))


# ---------------------------------------------------------------------- one weight path
def test_shared_path_one_weight_path_for_every_path():
    cfg = small_config(**{"weights.shared_path": True, "solver.paths": 3,
                          "output.store_weights": True, "init.per_path_tokens": True,
                          "diagnostics.ledger": False})
    r = wflow.simulate(cfg)
    for p in (1, 2):
        np.testing.assert_array_equal(r.D[:, p], r.D[:, 0])
    assert np.max(np.abs(r.X[0, 1] - r.X[0, 0])) > 0.1  # own tokens
    assert np.max(np.abs(r.D[-1, 0] - r.D[0, 0])) > 0.1  # the weights do move (OU noise)
    # the weight path does not depend on which paths of the ensemble a run holds
    r2 = wflow.simulate({**cfg, "init": {**cfg["init"], "first_path": 5}})
    np.testing.assert_array_equal(r2.D[:, 0], r.D[:, 0])
    # without the key the noises differ
    r3 = wflow.simulate(small_config(**{"solver.paths": 2, "output.store_weights": True,
                                        "diagnostics.ledger": False}))
    assert np.max(np.abs(r3.D[-1, 1] - r3.D[-1, 0])) > 0.1


def test_shared_path_refuses_per_path_weights():
    with pytest.raises(ConfigError, match="weights.shared_path"):
        resolve(small_config(**{"weights.shared_path": True, "init.per_path_weights": True}))


def test_class_tokens_around_their_centres():
    """Path p's tokens lie around (−1)^⌊c/d⌋ e_(c mod d), c = p mod C."""
    C, d, P = 5, 3, 10
    s = Simulation(small_config(**{"init.tokens": "classes", "init.classes": C, "model.d": d,
                                   "solver.paths": P, "model.n": 50, "init.kappa": 30.0,
                                   "init.class_kappa": 100.0}))
    for p in range(P):
        c = p % C
        mu = np.zeros(d)
        mu[c % d] = -1.0 if c >= d else 1.0
        m = s.X0[p].mean(axis=0)
        assert m @ mu > 0.85  # vMF(κ = 30) around a centre within vMF(100) of μ
    with pytest.raises(ConfigError, match="init.classes"):
        resolve(small_config(**{"init.tokens": "classes", "init.classes": 7, "model.d": 3}))


# ---------------------------------------------------------------------- the paper forcing
def paper_forcing(t, d, phi, n_pairs=None):
    """Direct transcription of the paper's code for d >= 4."""
    F = np.zeros((d, d))
    n_pairs = d * (d - 1) // 2
    for a in range(d):
        F[a, a] = 2 + 1.5 * np.cos(t + phi + 2 * np.pi * a / d)
    p = 0
    for a in range(d):
        for b in range(a + 1, d):
            F[a, b] = F[b, a] = np.sin(2 * (t + phi) + 2 * np.pi * p / n_pairs)
            p += 1
    return F


@pytest.mark.parametrize("d", [4, 5, 7])
def test_paper_forcing_matches_transcription(d):
    H = 3
    proc = Oscillating(d, H, "spread", target="paper")
    for t in (0.0, 0.7, 3.9, -2.2):
        F = proc.forcing(t)
        for h in range(H):
            np.testing.assert_allclose(F[h], paper_forcing(t, d, 2 * np.pi * h / H), atol=1e-14)
    # it is another forcing than wflow's for d >= 4, the same for d <= 3
    assert np.max(np.abs(proc.forcing(0.7) - Oscillating(d, H, "spread").forcing(0.7))) > 0.1
    np.testing.assert_array_equal(Oscillating(3, H, target="paper").forcing(0.7),
                                  Oscillating(3, H).forcing(0.7))


def test_paper_forcing_exact_scheme_solves_the_ode():
    """The periodic solution of the paper forcing satisfies dP/dt = F − P (central
    difference, error O(h²) ≈ 1e-9 at h = 1e-4, against entries of size 1)."""
    proc = Oscillating(5, 2, "spread", "exact", target="paper")
    h = 1e-4
    for t in (0.3, 2.0):
        dP = (proc.periodic_solution(t + h) - proc.periodic_solution(t - h)) / (2 * h)
        np.testing.assert_allclose(dP, proc.forcing(t) - proc.periodic_solution(t), atol=1e-7)


def test_paper_target_from_config():
    cfg = small_config(**{"weights.process": "oscillating", "weights.target": "paper",
                          "model.d": 5, "diagnostics.ledger": False})
    s = Simulation(cfg)
    assert s.process.target == "paper"
    np.testing.assert_allclose(s.process.forcing(1.0)[0], paper_forcing(1.0, 5, 0.0), atol=1e-14)
    with pytest.raises(ConfigError, match="weights.target"):
        resolve({**cfg, "weights": {**cfg["weights"], "target": "paperr"}})


# -------------------------------------------------------------------------- the quick study
def test_laplacian_study_quick(tmp_path):
    """The quick study: every number resolved (Δt halved moves it by less than its
    interval), the ANOVA identity in the files, and the V = ±I pairs equal row for row."""
    from wflow.studies import run_study

    res = run_study("laplacian", tmp_path, scale="quick", formats=("png",))
    t = res.table
    assert len(t["k"]) == 4 and all(t["resolved"])
    assert max(t["anova_identity_err"]) < 1e-12
    rows = {(v, k): i for i, (v, k) in enumerate(zip(t["values"], t["k"]))}
    for m in ("variance", "within_sequence_frac", "between_class_frac"):
        assert t[m][rows[("minus_identity", 8)]] == pytest.approx(t[m][rows[("identity", 0)]],
                                                                  rel=1e-12)
        # V = +I attention heads under descent push tokens apart: more variance than V = −I
    assert t["variance"][rows[("identity", 0)]] > t["variance"][rows[("minus_identity", 0)]]
    assert "d = 3 descent" in res.text
    pngs = [f for f in res.files if str(f).endswith(".png")]
    assert len(pngs) == 3 and all(f.stat().st_size < 300_000 for f in pngs)


# -------------------------------------------------------------------------- refinement
def test_refine_reruns_a_point_at_dt_over_4_first_order(tmp_path, monkeypatch):
    """Laplacian.refine: the chosen point gains a run at Δt/4 and is then reported from
    (Δt/4, Δt/2); the others keep (Δt/2, Δt). With deterministic weights (g² = 0) Euler is
    first order, so the change of the total variance at T halves with the step:
    |v(Δt/2) − v(Δt/4)| ≈ |v(Δt) − v(Δt/2)| / 2 (ratio 1.6–2.5). (The bootstrap of the
    batch intervals is replaced by a constant: it is not what this test checks.)"""
    from wflow.studies import StudyOptions, get_study, laplacian, run_study

    monkeypatch.setattr(laplacian, "anova_ci", lambda X, labels: np.zeros(len(laplacian.BATCH)))
    st = get_study("laplacian")
    opts = StudyOptions(scale="quick", formats=(), overrides=("weights.noise_var=0",))
    first = run_study(st, tmp_path, opts).table
    key = (3, "descent", "identity", 8)
    res = st.refine(tmp_path, opts, points=[key])
    t = res.table
    rows = {(d, s, v, k): i for i, (d, s, v, k) in
            enumerate(zip(t["d"], t["sign"], t["values"], t["k"]))}
    i = rows[key]
    assert (t["dt"][i], t["dt_coarse"][i]) == (0.005, 0.01)
    assert (tmp_path / "lap-d=3-sign=descent-values=identity-laplacian_heads=8-dt=0.005.h5"
            ).exists()
    assert all((t["dt"][j], t["dt_coarse"][j]) == (0.01, 0.02) for j in rows.values() if j != i)
    ratio = first["total_dt_change"][i] / t["total_dt_change"][i]
    assert 1.6 < ratio < 2.5, ratio
    # a second refine of no point keeps the Δt/4 run (found in outdir) and adds none
    again = st.refine(tmp_path, opts, points=[]).table
    assert again["dt"] == t["dt"] and again["total"] == t["total"]
    with pytest.raises(ValueError, match="not points"):
        st.refine(tmp_path, opts, points=[(5, "descent", "identity", 8)])


def test_same_path_runs_reproduce_the_run_and_converge_at_first_order(tmp_path):
    """same_path_runs drives Δt, Δt/2, Δt/4 with the run's own Brownian path: the Δt run is
    the study's run (the file) to 1e-12, and with one path the final tokens converge at strong
    order 1 (additive noise): |X(Δt) − X(Δt/2)| / |X(Δt/2) − X(Δt/4)| within 1.6–2.5."""
    from wflow.storage.io import read
    from wflow.studies import StudyOptions, get_study
    from wflow.studies.laplacian import same_path_runs
    from wflow.sweeps.sweep import run_sweep

    tasks = get_study("laplacian").tasks(StudyOptions(scale="quick"))
    name, cfg = next((n, c) for n, c in tasks if c["solver"]["dt"] == 0.02
                     and c["model"]["values"] == "minus_identity"
                     and len(c["model"]["laplacian_heads"]) == 0)
    run_sweep([(name, cfg)], tmp_path)
    runs = same_path_runs(name, cfg, halvings=(0, 1, 2))
    _, arr, _ = read(tmp_path / f"{name}.h5")
    assert np.max(np.abs(runs[0.02]["X_final"] - np.asarray(arr["X"][-1]))) < 1e-12
    e1 = np.max(np.abs(runs[0.02]["X_final"] - runs[0.01]["X_final"]))
    e2 = np.max(np.abs(runs[0.01]["X_final"] - runs[0.005]["X_final"]))
    assert 1.6 < e1 / e2 < 2.5, (e1, e2)
