r"""The non-uniform FFTs of the spectral summation [model §2s]: the one door to finufft.

.. math::
    \text{type 1:}\quad F_k = \sum_j c_j\, e^{\pm i\langle k, t_j\rangle},\qquad
    \text{type 2:}\quad f(t_i) = \sum_k F_k\, e^{\pm i\langle k, t_i\rangle},

over the modes :math:`k \in \{-L,\dots,L\}^m`, m = 1 (angles on :math:`S^1`) or m = 2 (the
polar and azimuthal angles of the double Fourier sphere on :math:`S^2`).

*The same bits every time.* Each call runs on one library thread (``nthreads = 1``) with a
deterministic FFT plan (``FFTW_ESTIMATE``) and a fixed upsampling factor and sort: a call
returns the same bits for the same input, whatever else runs. The callers split their work
into items of a size fixed by the data (never by the thread count) and add item results in
a fixed order.

finufft is imported here and nowhere else (an import-linter contract), on first use: it is
an optional extra (``pip install "wflow[spectral]"``), because the finufft wheels of the
package index link FFTW, which is GPL-2.0-or-later, while wflow's core dependencies are
permissive. Without it the spectral summation is refused in one line (:func:`available`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["EPS", "type1", "type2", "available", "MISSING"]

#: the one line a spectral summation gets without the optional extra
MISSING = ("summation = 'spectral' needs the optional extra: pip install \"wflow[spectral]\" "
           "(finufft; its wheels link FFTW, GPL-2.0-or-later)")


def available() -> bool:
    """Whether finufft can be imported."""
    try:
        import finufft  # noqa: F401
    except ImportError:
        return False
    return True


def _finufft():
    import finufft

    return finufft


#: the library's requested precision (its relative ℓ² error of a transform)
EPS = 1e-14
#: FFTW_ESTIMATE: a plan that does not depend on timings
_FFTW_ESTIMATE = 64
_OPTS = dict(nthreads=1, fftw=_FFTW_ESTIMATE, upsampfac=2.0, spread_sort=1, modeord=0, debug=0)


def type1(points, c, L, isign):
    r""":math:`F_k = \sum_j c_j e^{i\,\mathrm{isign}\langle k, t_j\rangle}`, :math:`|k_a| \le L`.

    Parameters
    ----------
    points : tuple of m arrays (n,) (the angles t_j, in [-π, 3π)).
    c : (K, n) complex strengths (K transforms on the same points).
    L : the largest mode.
    isign : +1 or -1.

    Returns
    -------
    (K, 2L+1) or (K, 2L+1, 2L+1) complex array, modes from -L to L along each axis.
    """
    c = np.ascontiguousarray(c, dtype=np.complex128)
    N = 2 * L + 1
    if len(points) == 1:
        return _finufft().nufft1d1(points[0], c, N, eps=EPS, isign=isign, **_OPTS).reshape(c.shape[0], N)
    return _finufft().nufft2d1(points[0], points[1], c, (N, N), eps=EPS, isign=isign,
                            **_OPTS).reshape(c.shape[0], N, N)


def type2(points, F, isign):
    r""":math:`f_i = \sum_k F_k e^{i\,\mathrm{isign}\langle k, t_i\rangle}` at the points.

    Parameters
    ----------
    points : tuple of m arrays (n,).
    F : (K, 2L+1) or (K, 2L+1, 2L+1) complex coefficients (modes -L..L).
    isign : +1 or -1.

    Returns
    -------
    (K, n) complex array.
    """
    F = np.ascontiguousarray(F, dtype=np.complex128)
    if len(points) == 1:
        out = _finufft().nufft1d2(points[0], F, eps=EPS, isign=isign, **_OPTS)
    else:
        out = _finufft().nufft2d2(points[0], points[1], F, eps=EPS, isign=isign, **_OPTS)
    return out.reshape(F.shape[0], -1)
