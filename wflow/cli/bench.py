r"""``wflow bench``: one quick table of wflow's field evaluation against two baselines.

For each case (n, H, d, P) the implementations evaluate the attention field at the same
random input (tokens uniform on :math:`S^{d-1}`, :math:`D_h = A_h + A_h^T`, β = 1, head
normalisation, tied values):

``wflow``
    :meth:`wflow.AttentionModel.evaluate`: velocity and every diagnostic (partition, gradient,
    b̂, energy, 𝒟, G², G²_hm, ∂_D E, Itô sum) in one fused pass over the pairs.
``numpy``
    the dense NumPy twin (:func:`numpy_dense_field`): the same quantities, one head at a
    time with ``n × n`` arrays.
``torch``
    PyTorch CPU ``scaled_dot_product_attention`` in float64, when PyTorch is installed (the
    ``bench`` extra): the H-head attention outputs :math:`a_h(x_i)` only (no projection, no
    diagnostics), batched over paths and heads.

The three are timed in rounds that call each once, the order rotated every round
(:func:`time_interleaved`): a drift of a shared machine reaches them alike, and the table
reports their ratios. The benchmark suite of the repository (``benchmarks/``, not installed)
holds the larger cases, the full steps, the memory probe and the shared-machine runs; it
imports its baselines from here.
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np

__all__ = ["QUICK_CASES", "case_arrays", "numpy_dense_field", "torch_sdpa", "dense_attention",
           "time_interleaved", "import_torch", "quick_bench", "format_quick_table"]

#: (n, H, d, P): the cases of ``wflow bench`` (seconds in all, compilation included).
QUICK_CASES = ((200, 10, 3, 10), (1024, 4, 3, 1), (512, 4, 16, 1))


def case_arrays(case, rng):
    """Tokens X (P, n, d) on the sphere and weights D = A + Aᵀ (P, H, d, d) of a case.

    Parameters
    ----------
    case : tuple
        (n, H, d, P).
    rng : numpy.random.Generator
        The source of the draw.

    Returns
    -------
    X, D : numpy.ndarray
        For d > 8, D is scaled by 1/√d so that β‖D‖₂ stays moderate (the dense twin's
        exponentials are unshifted).
    """
    n, H, d, P = case
    X = rng.normal(size=(P, n, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    A = rng.normal(size=(P, H, d, d))
    D = A + np.swapaxes(A, -1, -2)
    if d > 8:
        D /= math.sqrt(d)
    return X, D


def numpy_dense_field(X, D, beta=1.0):
    """Dense NumPy twin of the fused pass: v (head normalisation, tied values) and every
    diagnostic, one head at a time with ``n × n`` arrays.

    Parameters
    ----------
    X : array_like
        (P, n, d) tokens on the sphere.
    D : array_like
        (P, H, d, d) symmetric interaction matrices.
    beta : float
        Inverse temperature (unshifted exponentials: moderate β‖D‖ only).

    Returns
    -------
    tuple
        velocity (P, n, d), partition (P, H, n), gradient (P, n, d), b_hat (P, n), energy,
        dissipation, G2, G2_hm (P,), dE_dD (P, H, d, d), ito_sum (P,): the fields of
        :class:`wflow.Field`, in its order.
    """
    X = np.asarray(X, dtype=float)
    D = np.asarray(D, dtype=float)
    P, n, d = X.shape
    H = D.shape[1]
    out = [np.empty((P, n, d)), np.empty((P, H, n)), np.empty((P, n, d)), np.empty((P, n)),
           np.empty(P), np.empty(P), np.empty(P), np.empty(P), np.empty((P, H, d, d)),
           np.empty(P)]
    for p in range(P):
        x = X[p]
        C = x @ x.T
        ito_w = 1.0 + C * C
        del C
        v = np.zeros((n, d))
        g = np.zeros((n, d))
        Z = np.empty((H, n))
        E = 0.0
        ito = 0.0
        for h in range(H):
            DX = x @ D[p, h].T  # D_h x_j
            W = np.exp(beta * (x @ DX.T))  # e^{s_ij}  (n, n)
            s0 = W.sum(axis=1)
            Z[h] = s0 / n
            A = (W @ DX) / s0[:, None]  # a_h(x_i)
            v += A - np.einsum("ia,ia->i", A, x)[:, None] * x
            g += W @ DX
            E += s0.sum()
            ito += np.einsum("ij,ij->", W, ito_w)
            out[8][p, h] = x.T @ (W @ x) / (2 * H * n * n)
            del W
        v /= H
        g /= H * n
        g -= np.einsum("ia,ia->i", g, x)[:, None] * x
        Zbar = Z.mean(axis=0)
        v2 = np.einsum("ia,ia->i", v, v)
        out[0][p] = v
        out[1][p] = Z
        out[2][p] = g
        out[3][p] = 1.0 / Zbar
        out[4][p] = E / (2 * beta * H * n * n)
        out[5][p] = np.einsum("ia,ia->", g, v) / n
        out[6][p] = np.mean(v2 / (1.0 / Z).mean(axis=0))
        out[7][p] = np.mean(v2 * Zbar)
        out[9][p] = ito / (2 * H * n * n)
    return tuple(out)


def torch_sdpa(torch, X, D, beta=1.0):
    """H-head attention outputs a_h(x_i) (P, H, n, d) by ``scaled_dot_product_attention``.

    Parameters
    ----------
    torch : module
        The imported PyTorch module (:func:`import_torch`).
    X, D : numpy.ndarray
        (P, n, d) tokens and (P, H, d, d) interaction matrices (float64).
    beta : float
        Inverse temperature (the attention scale).

    Returns
    -------
    torch.Tensor
        Queries D_h x_i, keys x_j, values D_h x_j (tied).
    """
    Xt = torch.from_numpy(X)
    Dt = torch.from_numpy(D)
    x = Xt[:, None]  # (P, 1, n, d)
    q = torch.matmul(x, Dt.transpose(-1, -2))  # rows D_h x_i  (P, H, n, d)
    k = x.expand(-1, Dt.shape[1], -1, -1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, q, scale=float(beta))


def dense_attention(X, D, beta=1.0):
    """a_h(x_i) (H, n, d) of one path by a dense, shifted softmax (checks :func:`torch_sdpa`).

    Parameters
    ----------
    X : numpy.ndarray
        (n, d) tokens.
    D : numpy.ndarray
        (H, d, d) interaction matrices.
    beta : float
        Inverse temperature.

    Returns
    -------
    numpy.ndarray
        (H, n, d) attention outputs before the projection.
    """
    DX = np.einsum("hab,jb->hja", D, X)
    S = beta * np.einsum("ia,hja->hij", X, DX)
    S -= S.max(axis=2, keepdims=True)
    W = np.exp(S)
    W /= W.sum(axis=2, keepdims=True)
    return np.einsum("hij,hja->hia", W, DX)


def time_interleaved(fns, repeats, warmups=None):
    """Median times of ``fns`` timed in rounds that call each once, in rotating order.

    Parameters
    ----------
    fns : list of callables
        The implementations (no arguments).
    repeats : int
        Rounds.
    warmups : list of callables, optional
        Called once each first (compilation, caches); default ``fns``.

    Returns
    -------
    times : list of float
        Median seconds per call of each function.
    outputs : list
        The output of each function's last call.
    """
    for w in (fns if warmups is None else warmups):
        w()
    k = len(fns)
    ts = [[] for _ in fns]
    outs = [None] * k
    for r in range(max(1, int(repeats))):
        for i in range(k):
            j = (i + r) % k
            t0 = time.perf_counter()
            outs[j] = fns[j]()
            ts[j].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in ts], outs


def import_torch():
    """PyTorch set to as many threads as numba's, or None.

    Returns
    -------
    torch : module or None
        The module (its intra-op thread count set to the kernels' ``get_num_threads()``: both
        sides of a ratio use the same cores).
    reason : str
        Why it is None ("" otherwise).
    """
    try:
        import torch
    except ImportError:
        return None, "torch not installed (the bench extra)"
    except Exception as exc:  # a broken install
        return None, f"import torch failed ({exc})"
    from wflow.kernels import get_num_threads

    torch.set_num_threads(max(1, get_num_threads()))
    return torch, ""


def _rel(a, b):
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def quick_bench(cases=QUICK_CASES, torch=True, repeats=5, seed=0, beta=1.0):
    """Time wflow, the NumPy twin and (if installed) PyTorch SDPA, interleaved, per case.

    Parameters
    ----------
    cases : iterable of tuple
        (n, H, d, P) each.
    torch : bool
        Include the PyTorch baseline when ``import torch`` works.
    repeats : int
        Timed rounds per case.
    seed : int
        Seed of the inputs.
    beta : float
        Inverse temperature.

    Returns
    -------
    list of dict
        Per case: ``case``, ``wflow_s``, ``numpy_s``, ``torch_s`` (None without torch),
        ``numpy_ratio`` and ``torch_ratio`` (baseline time ÷ wflow time, same run),
        ``rel_diff`` (‖v_numpy − v_wflow‖ / ‖v_wflow‖) and ``torch_note``.
    """
    from wflow.model.attention import AttentionModel

    torch_mod, reason = import_torch() if torch else (None, "torch left out")
    model = AttentionModel(beta=float(beta))
    rng = np.random.default_rng(seed)
    return [_quick_case(model, case_arrays(tuple(int(c) for c in case), rng), case, torch_mod,
                        reason, repeats, beta) for case in cases]


def _quick_case(model, arrays, case, torch_mod, reason, repeats, beta):
    """The row of :func:`quick_bench` for one case."""
    X, D = arrays
    fns = [lambda: model.evaluate(X, D), lambda: numpy_dense_field(X, D, beta)]
    if torch_mod is not None:
        def run_torch():
            with torch_mod.no_grad():
                return torch_sdpa(torch_mod, X, D, beta)
        fns.append(run_torch)
    ts, outs = time_interleaved(fns, repeats)
    row = {"case": case_label(case), "wflow_s": ts[0], "numpy_s": ts[1],
           "numpy_ratio": ts[1] / ts[0], "torch_s": None, "torch_ratio": None,
           "rel_diff": _rel(outs[1][0], outs[0].velocity), "torch_note": reason}
    if torch_mod is not None:
        row.update(torch_s=ts[2], torch_ratio=ts[2] / ts[0], torch_note="attention outputs only")
    return row


def case_label(case):
    """``"(n, H, d) P=P"`` of a case (n, H, d, P)."""
    n, H, d, P = (int(c) for c in case)
    return f"({n}, {H}, {d}) P={P}"


def format_quick_table(rows) -> str:
    """The plain-text table of :func:`quick_bench` rows, with a legend."""
    head = ("case (n, H, d)", "wflow", "numpy twin", "numpy ÷ wflow", "torch SDPA",
            "torch ÷ wflow", "rel diff v")

    def ms(t):
        return "-" if t is None else f"{t * 1e3:.2f} ms"

    def x(r):
        return "-" if r is None else f"{r:.1f}x"

    body = [(r["case"], ms(r["wflow_s"]), ms(r["numpy_s"]), x(r["numpy_ratio"]),
             ms(r["torch_s"]), x(r["torch_ratio"]), f"{r['rel_diff']:.1e}") for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)).rstrip() for b in body]
    note = rows[0]["torch_note"] if rows else ""
    lines += ["",
              "median time of one field evaluation, the implementations interleaved; "
              "'X ÷ wflow' = time(X) / time(wflow), same run;",
              "wflow and the numpy twin compute v and every diagnostic; torch the attention "
              "outputs only" + (f"; {note}" if rows and rows[0]["torch_s"] is None else "") + ";",
              "rel diff v: ‖v_numpy − v_wflow‖ / ‖v_wflow‖. The full benchmark suite: "
              "benchmarks/ in the repository."]
    return "\n".join(lines)
