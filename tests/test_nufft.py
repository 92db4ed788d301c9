"""wflow's non-uniform FFTs [model §2s]: the relative ℓ² error of type 1 and type 2, 1-D and 2-D,
both signs, against direct sums in extended precision; K transforms on the same points against
K single ones; the kernel's Fourier transform of the deconvolution against an mpmath integral;
the same bits from one call to the next and whatever runs beside it."""

from concurrent.futures import ThreadPoolExecutor

import mpmath
import numpy as np
import pytest

from wflow.kernels import nufft
from wflow.kernels import nufft_es as es

_U = np.finfo(float).eps
_LD = np.clongdouble
extended = pytest.mark.skipif(np.finfo(np.longdouble).eps > 1e-18,
                              reason="the references and the kernel's tables need an extended long double")


def _phases(k, t, s):
    a = np.multiply.outer(k.astype(np.longdouble), t.astype(np.longdouble)) * s
    return np.cos(a) + 1j * np.sin(a)


def _direct1(pts, c, L, s):
    k = np.arange(-L, L + 1)
    c = c.astype(_LD)
    if len(pts) == 1:
        return c @ _phases(k, pts[0], s).T
    return np.einsum("Kj,aj,bj->Kab", c, _phases(k, pts[0], s), _phases(k, pts[1], s))


def _direct2(pts, F, s):
    L = (F.shape[1] - 1) // 2
    k = np.arange(-L, L + 1)
    F = F.astype(_LD)
    if len(pts) == 1:
        return F @ _phases(k, pts[0], s)
    return np.einsum("Kab,aj,bj->Kj", F, _phases(k, pts[0], s), _phases(k, pts[1], s))


def _err(a, b):
    return float(np.linalg.norm((a - b).astype(complex)) / np.linalg.norm(b.astype(complex)))


def _case(m, L, n, K, seed):
    rng = np.random.default_rng(seed)
    pts = tuple(rng.uniform(-np.pi, 3 * np.pi, n) for _ in range(m))
    c = rng.standard_normal((K, n)) + 1j * rng.standard_normal((K, n))
    F = rng.standard_normal((K,) + (2 * L + 1,) * m) + 1j * rng.standard_normal((K,) + (2 * L + 1,) * m)
    return pts, c, F


def _bound(L):
    """EPS, plus the conditioning of the sums in the angles: a one-ulp change of t in [-π, 3π)
    moves them by about u·L·max|t|/π in ℓ² (measured 2.6 u L at L = 2050)."""
    return nufft.EPS + 3.0 * _U * L


@extended
@pytest.mark.parametrize("m, L, isign", [
    pytest.param(m, L, s, marks=[pytest.mark.slow] if (L, s) == (2050, 1) else [])
    for s in (-1, 1) for m, L in ((1, 3), (1, 200), (1, 2050), (2, 3), (2, 30), (2, 98))])
def test_relative_error_against_direct_sums(m, L, isign):
    """Type 1 and type 2 within EPS (degree ≤ 5: the library's floor, measured ≤ 2.1e-15) and
    within EPS + 3uL (the conditioning in the angles) at every degree the callers use."""
    n = 300
    pts, c, F = _case(m, L, n, 2, seed=L + m)
    e1 = _err(nufft.type1(pts, c, L, isign), _direct1(pts, c, L, isign))
    e2 = _err(nufft.type2(pts, F, isign), _direct2(pts, F, isign))
    bound = nufft.EPS if L <= 5 else _bound(L)
    assert e1 <= bound and e2 <= bound, (e1, e2, bound)


@pytest.mark.parametrize("m", [1, 2])
def test_K_transforms_are_the_single_transforms(m):
    """The kernel values of a point serve every strength vector: K transforms at once give the K
    single transforms (the K axis is not mixed up with the modes or the points)."""
    L = 7
    pts, c, F = _case(m, L, 500, 3, seed=4)
    A = nufft.type1(pts, c, L, -1)
    B = nufft.type2(pts, F, 1)
    for k in range(3):
        a, b = nufft.type1(pts, c[k:k + 1], L, -1)[0], nufft.type2(pts, F[k:k + 1], 1)[0]
        np.testing.assert_allclose(A[k], a, rtol=0, atol=1e-13 * np.abs(a).max())
        np.testing.assert_allclose(B[k], b, rtol=0, atol=1e-13 * np.abs(b).max())
    assert A.shape == (3,) + (2 * L + 1,) * m and B.shape == (3, 500)


@pytest.mark.parametrize("m", [1, 2])
def test_periodic_in_the_angles(m):
    """The angles enter modulo 2π: t and t ± 2π give the same transforms (to the conditioning)."""
    L = 12
    pts, c, F = _case(m, L, 400, 1, seed=5)
    shifted = tuple(np.where(t < np.pi, t + 2 * np.pi, t - 2 * np.pi) for t in pts)
    A, B = nufft.type1(pts, c, L, 1), nufft.type1(shifted, c, L, 1)
    assert _err(B, A) < _bound(L)
    a, b = nufft.type2(pts, F, -1), nufft.type2(shifted, F, -1)
    assert _err(b, a) < _bound(L)


@extended
def test_deconvolution_kernel_against_mpmath():
    r"""φ̂(ξ) = ∫ φ(z) cos(ξz) dz by the extended-precision Gauss–Legendre rule agrees with an
    mpmath integral at 30 digits to 1e-15 (relative) over the ξ the transforms use
    (|ξ| ≤ πw/4 at σ = 2): φ̂ is a cancellation there (φ̂(4π) ≈ 0.05 φ̂(0))."""
    mpmath.mp.dps = 30
    b = mpmath.mpf(es.BETA)

    def exact(xi):
        f = lambda z: mpmath.exp(b * (mpmath.sqrt(1 - z * z) - 1)) * mpmath.cos(xi * z)
        return float(2 * mpmath.quad(f, [0, 0.25, 0.5, 0.75, 0.9, 0.99, 1]))

    xis = np.array([0.0, 1.0, 5.0, np.pi * es.W / 4])
    got = es.phihat(xis)
    ref = np.array([exact(x) for x in xis])
    np.testing.assert_allclose(got, ref, rtol=1e-15, atol=0)


@extended
def test_kernel_values_by_horner():
    """The polynomial table gives φ at every offset of a point within 1e-15 (max φ = 1): the
    Chebyshev fit in extended precision at exact nodes, Horner's rule in float64."""
    P = es.horner_table()
    u = np.linspace(0.0, 1.0, 4001)
    z = (2 * (np.arange(es.W)[None, :] + u[:, None]) - es.W) / es.W
    v = np.zeros_like(z) + P[0]
    for d in range(1, P.shape[0]):
        v = v * (u[:, None] - 0.5) + P[d]
    assert np.max(np.abs(v - es.phi(z))) < 1e-15


def test_fine_grid():
    """The fine grid is even, 11-smooth (a fast size of pocketfft), at least σN and 2w."""
    for N in (3, 11, 57, 197, 4101):
        nf = es.fine_size(N)
        m = nf
        for p in (2, 3, 5, 7, 11):
            while m % p == 0:
                m //= p
        assert m == 1 and nf % 2 == 0 and nf >= es.SIGMA * N and nf >= 2 * es.W


def test_upsampled_grid_gives_the_same_bits():
    """nufft.upsample(F) passed to type2 at blocks of points: the bits of type2(F) at each block."""
    pts, c, F = _case(2, 9, 600, 2, seed=6)
    up = nufft.upsample(F, 1)
    for a, b in ((0, 250), (250, 600)):
        blk = tuple(t[a:b] for t in pts)
        assert nufft.type2(blk, up, 1).tobytes() == nufft.type2(blk, F, 1).tobytes()
    with pytest.raises(ValueError, match="sign"):
        nufft.type2(pts, up, -1)


def test_bad_coefficients():
    with pytest.raises(ValueError, match="odd"):
        nufft.type2((np.zeros(3),), np.zeros((1, 4), dtype=complex), 1)


@pytest.mark.parametrize("m", [1, 2])
def test_same_bits_whatever_runs_beside(m):
    """A call gives the same bits run again, and run on Python threads beside other calls."""
    L = 20
    blocks = [_case(m, L, 3000, 2, seed=s) for s in range(4)]

    def work(b):
        pts, c, F = b
        return nufft.type1(pts, c, L, -1).tobytes() + nufft.type2(pts, F, 1).tobytes()

    serial = [work(b) for b in blocks]
    assert serial == [work(b) for b in blocks]
    with ThreadPoolExecutor(max_workers=2) as pool:
        assert list(pool.map(work, blocks)) == serial


@extended
@pytest.mark.parametrize("m", [1, 2])
@pytest.mark.parametrize("w", [6, 10, 13, 16])
def test_type2_within_the_mode_error_bound(m, w):
    """A type-2 synthesis of width w errs by at most Σ_k |F_k| e_k per axis (the kernel's
    per-mode error, nufft.mode_error) plus the round-off, and the bound is not vacuous: the
    error reaches a tenth of it where the kernel's error dominates the round-off."""
    rng = np.random.default_rng(40 + w)
    L = 20
    n = 3000
    pts = tuple(rng.uniform(-np.pi, 3 * np.pi, n) for _ in range(m))
    shape = (2, 2 * L + 1) + ((2 * L + 1,) if m == 2 else ())
    F = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    e = nufft.mode_error(2 * L + 1, w)
    assert e.shape == (2 * L + 1,) and np.all(e > 0)
    if m == 1:
        bound = np.abs(F) @ e
    else:
        bound = np.einsum("kab,ab->k", np.abs(F), e[:, None] + e[None, :] + np.outer(e, e))
    err = np.abs(nufft.type2(pts, F, 1, w=w) - _direct2(pts, F, 1).astype(complex))
    l1 = np.abs(F).reshape(2, -1).sum(axis=1)
    roundoff = 8 * _U * (L + 3) * 3 * np.pi * l1  # the conditioning in the angles, with a margin
    assert np.all(err <= (bound + roundoff)[:, None])
    if w <= 13:
        assert np.max(err) >= 0.1 * np.max(bound) / (2 * L + 1) ** (m / 2)


def test_mode_error_falls_with_the_width():
    """e_k falls by about a decade per unit of width (≈ 10^-(w-1) at low modes)."""
    N = 41
    lo = [float(nufft.mode_error(N, w)[N // 2]) for w in nufft.WIDTHS]
    assert all(b < a for a, b in zip(lo, lo[1:]))
    for w, v in zip(nufft.WIDTHS, lo):
        assert 10.0 ** (-(w + 1)) < v < 10.0 ** (-(w - 2)), (w, v)
    with pytest.raises(ValueError, match="kernel width"):
        nufft.mode_error(N, 17)
