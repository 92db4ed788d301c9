r"""The initial state of a run: the streams, the tokens :math:`X_0`, the weights :math:`D(0)`,
the value matrices and the perturbations of the start [model §9, §10].

.. math::

    \text{stream}(k) = \text{SeedSequence}(\text{init.seed},\ \text{spawn\_key} = k):
    \quad (0,)\ X_0,\ (1,)\ D(0) \text{ then the values},\ (2, p)\ \text{the noise of path } p,

``(0, p)`` and ``(1, p)`` path p's own X0 and D(0) under ``init.per_path_tokens`` /
``init.per_path_weights`` and ``init.tokens = "classes"`` (its sequence centre, then its
tokens), ``(3,)`` and ``(4,)`` the directions of ``init.token_perturbation`` and
``init.weight_perturbation`` (drawn only when they are > 0), ``(5,)`` the one noise stream of
every path under ``weights.shared_path``, ``(6, p)`` the token noise of path p (only when
``model.diffusion`` > 0 on particles, [model §6b]), ``(7,)`` the coefficients of a density's
``init.tokens = "uniform_noise"`` (wflow.model.density). Path p is path ``init.first_path + p`` of the
ensemble, so its draws depend on (seed, p) alone. The draws happen in this order (D(0), the
values, X0, the perturbations), whatever is used of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wflow.engine import features as _features
from wflow.errors import ConfigError
from wflow.geometry import sphere
from wflow.model.processes.values import fixed_values
from wflow.model.weights import general_matrices, initial_weights, load_weight_file

__all__ = ["Start", "draw", "perturb_tokens", "perturb_weights", "UNIT_TOL"]


@dataclass
class Start:
    """What :func:`draw` gives: ``X0`` (P, n, d), ``D0`` (P, H, d, d) before the weight
    process's own :meth:`~wflow.model.weights.WeightProcess.initial`, the value matrices
    ``values`` (H, d, d) or None (tied), the noise seeds of the paths ``path_seeds``, the
    ensemble index of the first path ``first_path`` and the token-noise seeds of the paths
    ``token_seeds`` (empty without token noise, [model §6b])."""

    X0: np.ndarray
    D0: np.ndarray
    values: np.ndarray | None
    path_seeds: list
    first_path: int
    token_seeds: list = ()


def draw(cfg: dict, tokens=None) -> Start:
    r"""The initial state of the validated configuration ``cfg`` (streams in the module
    docstring).

    .. math::

        X_0^\varepsilon = \frac{X_0 + \varepsilon U}{\sqrt{1 + \varepsilon^2}}, \qquad
        D^\varepsilon(0) = D(0) + \varepsilon S .

    Parameters
    ----------
    cfg : dict
        A validated configuration.
    tokens : array (P, n, d), optional
        Unit rows given instead of the drawn X0 (the draw still happens, so no other stream
        moves); the token perturbation applies on top.
    """
    m, ini, w, s = (cfg[k] for k in ("model", "init", "weights", "solver"))
    n, d, H, P = m["n"], m["d"], m["heads"], s["paths"]
    seed = int(ini["seed"])
    first = int(ini.get("first_path", 0))

    def stream(*key):
        return np.random.SeedSequence(seed, spawn_key=key)

    if w["shared_path"]:  # one weight path: every path's generator replays one stream
        path_seeds = [stream(5) for _ in range(P)]
    else:
        path_seeds = [stream(2, first + p) for p in range(P)]
    # token noise [model §6b]: per path, also under shared_path; none without diffusion
    # (a density's diffusion is in its fluxes, [model §5b]: no token noise)
    token_seeds = ([stream(6, first + p) for p in range(P)]
                   if _features.of(cfg).token_noise else [])

    # initial weights (shared by the paths unless asked per path), values
    rng_w = np.random.default_rng(stream(1))
    given = None
    # model.interaction = "general": weight files are any real matrices [model §1b]
    with general_matrices(m.get("interaction", "symmetric") == "general"):
        if ini["weights"] == "file":
            given = load_weight_file(ini["weights_file"], key="init.weights_file")["D"]
            if given.ndim == 4:
                given = given[0]
        wkind = "given" if ini["weights"] == "file" else ini["weights"]
        shared_D0 = initial_weights(wkind, H, d, rng_w, given)
        if ini.get("per_path_weights"):
            D0 = np.stack([initial_weights(wkind, H, d,
                                           np.random.default_rng(stream(1, first + p)), given)
                           for p in range(P)])
        else:
            D0 = np.broadcast_to(shared_D0, (P, H, d, d)).copy()
    # the values: drawn (gaussian, symmetric_gaussian) after the shared D(0) draw, whatever
    # per_path_weights [model §1b]
    values = fixed_values(m["values"], H, d, rng_w)

    # initial tokens
    if ini["tokens"] == "classes":
        X0 = np.stack([_class_tokens(ini, n, d, first + p,
                                     np.random.default_rng(stream(0, first + p)))
                       for p in range(P)])
    elif ini.get("per_path_tokens"):
        X0 = np.stack([_tokens(ini, n, d, np.random.default_rng(stream(0, first + p)), cfg)
                       for p in range(P)])
    else:
        X0 = _tokens(ini, n, d, np.random.default_rng(stream(0)), cfg)[None]
    X0 = np.broadcast_to(X0, (P, n, d)).copy()
    if tokens is not None:
        X0 = np.array(tokens, dtype=float)
    # perturbations of the start (stability studies): same directions for every path
    eps_x = float(ini.get("token_perturbation", 0.0) or 0.0)
    if eps_x > 0:
        X0 = perturb_tokens(X0, eps_x, np.random.default_rng(stream(3)))
    eps_d = float(ini.get("weight_perturbation", 0.0) or 0.0)
    if eps_d > 0:
        D0 = perturb_weights(D0, eps_d, np.random.default_rng(stream(4)))
    return Start(X0, D0, values, path_seeds, first, token_seeds)


def _class_tokens(ini, n, d, p, rng):
    r"""Tokens of path p of class :math:`c = p \bmod C` (``init.tokens = "classes"``).

    .. math::
        \mu_c = (-1)^{\lfloor c/d\rfloor} e_{c \bmod d}, \qquad
        m_p \sim \mathrm{vMF}(\mu_c, \kappa_{\text{class}}), \qquad
        x_{pi} \sim \mathrm{vMF}(m_p, \kappa)\ (i = 1..n),

    drawn in this order from path p's own token stream ``(0, p)``.
    """
    return sphere.von_mises_fisher(n, _class_centre(ini, d, p, rng), float(ini["kappa"]),
                                   rng)

def _class_centre(ini, d, p, rng):
    c = p % int(ini["classes"])
    mu = np.zeros(d)
    mu[c % d] = -1.0 if c >= d else 1.0
    return sphere.von_mises_fisher(1, mu, float(ini["class_kappa"]), rng)[0]

def _tokens(ini, n, d, rng, cfg=None):
    kind = ini["tokens"]
    if kind == "octahedral":
        return sphere.octahedral(n, d, rng, noise=float(ini["token_noise"]))
    if kind in ("uniform", "uniform_mode", "uniform_noise"):  # the last two: density only,
        return sphere.uniform(n, d, rng)  # whose X0 is replaced by the cell averages
    if kind == "vmf":
        mu = np.zeros(d)
        mu[-1] = 1.0
        return sphere.von_mises_fisher(n, mu, float(ini["kappa"]), rng)
    if kind == "file":
        return _load_tokens(ini["tokens_file"], n, d, ini["normalize"])
    if kind == "imported":  # an imported model's own starts [model §5c]
        from wflow.model.processes.imported import initial_tokens

        return initial_tokens(cfg, n, d, rng)
    raise ConfigError(f"init.tokens = {kind!r}: allowed values are octahedral, uniform, vmf, "
                      "classes, file, imported")


def perturb_tokens(X, eps, rng):
    r"""Every token moved by the geodesic distance :math:`\arctan\varepsilon`:

    .. math:: x_i^\varepsilon = \frac{x_i + \varepsilon u_i}{\sqrt{1 + \varepsilon^2}},\qquad
        u_i = \frac{P_{x_i} g_i}{|P_{x_i} g_i|},\quad g_i \sim N(0, I_d),

    one draw ``rng.standard_normal((n, d))`` shared by the paths (X is (P, n, d))."""
    X = np.asarray(X, dtype=float)
    g = rng.standard_normal(X.shape[-2:])
    U = sphere.project(X, np.broadcast_to(g, X.shape))
    U = U / np.linalg.norm(U, axis=-1, keepdims=True)
    return sphere.normalize(X + eps * U)


def perturb_weights(D, eps, rng):
    r""":math:`D_h^\varepsilon = D_h + \varepsilon S_h`, :math:`S_h = (\Xi_h + \Xi_h^T)/|\Xi_h +
    \Xi_h^T|_F`, :math:`\Xi_h` iid N(0, 1) (one draw (H, d, d) shared by the paths; D is
    (P, H, d, d)): each head moves by ε in Frobenius norm and stays symmetric."""
    D = np.asarray(D, dtype=float)
    xi = rng.standard_normal(D.shape[-3:])
    S = xi + xi.transpose(0, 2, 1)
    S /= np.linalg.norm(S, axis=(-2, -1), keepdims=True)
    return D + eps * S


#: rows of a tokens file whose norm is within this of 1 are unit vectors (float32 files pass)
UNIT_TOL = 1e-6


def _load_tokens(path, n, d, normalize=False):
    from wflow.storage.io import read_arrays

    where = f"init.tokens_file = {str(path)!r}"
    raw = read_arrays(path, ("X",), what="tokens file", where=where, npy_key="X")
    if "X" not in raw:
        raise ConfigError(f"{where}: key 'X' missing: a .npz or .h5 tokens file holds the "
                          f"tokens as an array 'X' of shape (model.n, model.d) = ({n}, {d}); "
                          f"a .npy file holds that array alone")
    X = raw["X"]
    if X.shape != (n, d):
        raise ConfigError(f"{where}: 'X' has shape {X.shape}, the configuration needs "
                          f"(model.n, model.d) = ({n}, {d})")
    if not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X):
        raise ConfigError(f"{where}: 'X' has dtype {X.dtype}, expected real numbers")
    X = X.astype(np.float64)
    bad = ~np.all(np.isfinite(X), axis=1)
    if bad.any():
        raise ConfigError(f"{where}: {int(bad.sum())} of {n} rows of 'X' hold NaN or infinite "
                          f"values (the first is row {int(np.argmax(bad))}); tokens must be finite")
    norms = np.linalg.norm(X, axis=1)
    off = np.abs(norms - 1.0) > UNIT_TOL
    if off.any() and not normalize:
        raise ConfigError(f"{where}: {int(off.sum())} of {n} rows of 'X' are not unit vectors "
                          f"(norms {norms.min():.3g} to {norms.max():.3g}); tokens lie on the "
                          f"sphere: normalise them, or set init.normalize = true to project them")
    if (norms == 0).any():
        raise ConfigError(f"{where}: {int((norms == 0).sum())} rows of 'X' are zero "
                          f"(the first is row {int(np.argmax(norms == 0))}); they have no "
                          f"direction to project onto the sphere")
    return sphere.normalize(X)
