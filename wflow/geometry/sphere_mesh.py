r"""A finite-volume mesh of S² from a spherical Voronoi tessellation [model §5b].

Cells :math:`K_k` are the Voronoi regions of generators :math:`c_k \in S^2` (near-uniform
Fibonacci points, optionally Lloyd-relaxed toward a centroidal tessellation). Two cells
:math:`i, j` that share an edge (a great-circle arc :math:`\Gamma_{ij}` between two Voronoi
vertices) exchange mass through it. The arc lies in the bisector plane of :math:`c_i, c_j`, so
its unit normal is the same at every point of the arc and tangent to the sphere there:

.. math::

    n_{ij} = \frac{c_j - c_i}{\lvert c_j - c_i\rvert}, \qquad
    \langle p, n_{ij}\rangle = 0 \ \ \forall p \in \Gamma_{ij}.

The outward flux of a tangent field :math:`u` through :math:`\Gamma_{ij}` is
:math:`\int_{\Gamma_{ij}} \langle u, n_{ij}\rangle\, d\ell`. For a field linear in the
position, :math:`u(p) = Ap` (solid-body rotation :math:`u = \omega\times p` is one), the
integral is exact with the arc moment

.. math::

    \int_{\Gamma_{ij}} p\, d\ell = \sin\theta\, a + (1 - \cos\theta)\, b, \qquad
    a = v_1,\ b = \frac{v_2 - \langle v_1, v_2\rangle v_1}{\lvert\cdot\rvert},\
    \theta = \angle(v_1, v_2),

so the discrete divergence of a divergence-free linear field is zero to round-off (the
divergence theorem holds cell by cell). First-order upwinding then gives the semi-discrete
scheme

.. math::

    \lvert K_i\rvert \frac{d\rho_i}{dt} = -\sum_{j \sim i} F_{ij}, \qquad
    F_{ij} = \phi_{ij}^{+}\rho_i - \phi_{ij}^{-}\rho_j, \quad
    \phi_{ij} = \int_{\Gamma_{ij}} \langle u, n_{ij}\rangle\, d\ell,

with :math:`\phi^\pm = \max(\pm\phi, 0)`. Mass :math:`\sum_i \lvert K_i\rvert\rho_i` is
conserved to round-off (:math:`F_{ji} = -F_{ij}`), and forward Euler keeps
:math:`\rho \ge 0` when :math:`\Delta t \sum_j \phi_{ij}^{+} \le \lvert K_i\rvert` (the CFL
number of :func:`cfl_dt`).

*Diffusion* (:math:`\nu\Delta_S\rho`, [model §5b]) is the conservative two-point flux

.. math::

    F^\nu_{ij} = -\nu\, w_{ij}\,(\rho_j - \rho_i), \qquad
    w_{ij} = \frac{\lvert\Gamma_{ij}\rvert}{d_S(c_i, c_j)},

consistent because a Voronoi edge is orthogonal to the geodesic between its generators
(:attr:`SphereMesh.diffusion_weights`); with it, forward Euler keeps :math:`\rho \ge 0` when
:math:`\Delta t\,(\sum_j\phi^+_{ij} + \nu\sum_j w_{ij}) \le \lvert K_i\rvert`.

Arrays in and out; no numba here (the cost is in the nonlocal field, not in the fluxes).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

__all__ = ["SphereMesh", "fibonacci_sphere", "voronoi_mesh", "edge_fluxes_linear",
           "edge_fluxes_midpoint", "upwind_rhs", "cfl_dt"]


def fibonacci_sphere(N: int) -> np.ndarray:
    r"""N near-uniform points on S² (the golden-angle spiral).

    .. math:: z_k = 1 - \frac{2k + 1}{N},\quad \varphi_k = k\pi(3 - \sqrt5),\quad
              c_k = (\sqrt{1 - z_k^2}\cos\varphi_k, \sqrt{1 - z_k^2}\sin\varphi_k, z_k).

    Returns an array of shape (N, 3).
    """
    if int(N) < 4:
        raise ValueError(f"fibonacci_sphere: N = {N!r}: needs at least 4 points")
    k = np.arange(int(N), dtype=float)
    z = 1.0 - (2.0 * k + 1.0) / N
    r = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    phi = k * np.pi * (3.0 - np.sqrt(5.0))
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


@dataclasses.dataclass(frozen=True)
class SphereMesh:
    """A Voronoi finite-volume mesh of S².

    Attributes
    ----------
    centres : (N, 3) generators :math:`c_k` (unit vectors)
    areas : (N,) cell areas :math:`\\lvert K_k\\rvert` (sum 4π)
    edges : (E, 2) int, the cells ``(i, j)``, i < j, sharing an edge
    lengths : (E,) arc lengths :math:`\\lvert\\Gamma_{ij}\\rvert`
    normals : (E, 3) unit normals :math:`n_{ij}` (from i to j)
    midpoints : (E, 3) arc midpoints (unit vectors)
    moments : (E, 3) arc moments :math:`\\int_{\\Gamma_{ij}} p\\, d\\ell`
    edge_vertices : (E, 2) int, the Voronoi vertices at the ends of each arc
    vertices : (V, 3) Voronoi vertices; regions : list of vertex-index lists (for drawing)
    """

    centres: np.ndarray
    areas: np.ndarray
    edges: np.ndarray
    lengths: np.ndarray
    normals: np.ndarray
    midpoints: np.ndarray
    moments: np.ndarray
    edge_vertices: np.ndarray
    vertices: np.ndarray
    regions: list

    @property
    def N(self) -> int:
        return self.centres.shape[0]

    @property
    def h(self) -> float:
        """Mesh size: the largest edge length."""
        return float(self.lengths.max())

    # the mesh protocol of the density model (shared with wflow.geometry.circle_fv.CircleGrid)
    def masses(self, rho) -> np.ndarray:
        r"""Cell masses :math:`m_k = \rho_k\lvert K_k\rvert`."""
        return np.asarray(rho) * self.areas

    def cell_values(self, f) -> np.ndarray:
        r"""A density given as a function ``f`` of points (M, 3) sampled at the centres and
        scaled to the mass :math:`\int f` of the sphere (:math:`\sum_k m_k = 1` for a
        probability density): a first-order cell average."""
        v = np.asarray(f(self.centres), dtype=float)
        return v / (self.areas @ v)

    @functools.cached_property
    def diffusion_weights(self) -> np.ndarray:
        r"""(E,) two-point weights :math:`w_{ij} = \lvert\Gamma_{ij}\rvert / d_S(c_i, c_j)`,
        :math:`d_S = \arccos\langle c_i, c_j\rangle` (computed as an arctangent)."""
        ci, cj = self.centres[self.edges[:, 0]], self.centres[self.edges[:, 1]]
        dist = np.arctan2(np.linalg.norm(np.cross(ci, cj), axis=1),
                          np.einsum("ea,ea->e", ci, cj))
        return self.lengths / dist

    def transport(self, rho, velocity, sigma, limiter=None, cfl=0.4, nu=0.0):
        r"""``(flux, rate, max_dt)`` of the field ``velocity`` (P, N, 3) at the centres, first
        order: :math:`\phi_{ij} = \sigma\lvert\Gamma_{ij}\rvert\langle (v_i + v_j)/2,
        n_{ij}\rangle`, the upwind :math:`F_{ij}` plus, for ``nu`` > 0, the diffusive flux
        :math:`-\nu w_{ij}(\rho_j - \rho_i)` (``nu`` a number or one diffusivity per edge,
        (P, E)), :math:`\dot\rho` and the CFL step (P,) of the sum. ``limiter`` is not used
        (no reconstruction on S²)."""
        v = np.asarray(velocity, dtype=float)
        i, j = self.edges[:, 0], self.edges[:, 1]
        phi = sigma * self.lengths * np.einsum("pea,ea->pe", 0.5 * (v[:, i] + v[:, j]),
                                               self.normals)
        F, rate = _upwind(self, rho, phi)
        if np.any(nu):  # a number, or one diffusivity per edge (P, E)
            rho = np.asarray(rho, dtype=float)
            F = F - nu * self.diffusion_weights * (rho[..., j] - rho[..., i])
            rate = -_cell_sums(self, F, -F) / self.areas
        return F, rate, cfl_dt(self, phi, cfl, nu)

    def face_mean(self, u) -> np.ndarray:
        r""":math:`\tfrac12(u_i + u_j)` on the edges (..., E) of cell values u (..., N)."""
        u = np.asarray(u, dtype=float)
        return 0.5 * (u[..., self.edges[:, 0]] + u[..., self.edges[:, 1]])

    def diffusion(self, rho, nu):
        r"""``(flux, rate)`` of the diffusion alone: :math:`F^\nu_{ij} = -\nu w_{ij}
        (\rho_j - \rho_i)` (..., E) and :math:`\dot\rho_i = -\sum_j F^\nu_{ij}/\lvert
        K_i\rvert` (..., N)."""
        rho = np.asarray(rho, dtype=float)
        i, j = self.edges[:, 0], self.edges[:, 1]
        F = -nu * self.diffusion_weights * (rho[..., j] - rho[..., i])
        return F, -_cell_sums(self, F, -F) / self.areas

    def diffusion_dt(self, nu, cfl=0.4) -> float:
        r"""The forward Euler step of the diffusion alone at Courant number ``cfl`` (1 is the
        positivity bound): :math:`\Delta t = \mathrm{cfl}/\max_i(\nu\sum_j w_{ij}/\lvert
        K_i\rvert)`."""
        w = self.diffusion_weights
        return float(cfl / np.max(nu * _cell_sums(self, w, w) / self.areas))

    def dissipation(self, flux, Phi, sigma) -> np.ndarray:
        r"""The scheme's dissipation :math:`\mathcal D_h = \sigma\sum_{ij} F_{ij}
        (\Phi_j - \Phi_i)` (P,): :math:`\frac{d}{dt}E = \sum_k\Phi_k\dot m_k
        = \sigma\mathcal D_h` exactly (σ² = 1)."""
        i, j = self.edges[:, 0], self.edges[:, 1]
        return sigma * np.sum(flux * (Phi[:, j] - Phi[:, i]), axis=-1)


def _arc(v1, v2):
    """Arc angle, length-weighted moment and midpoint of the minor arcs v1 → v2 (rows)."""
    c = np.einsum("ij,ij->i", v1, v2)
    w = v2 - c[:, None] * v1
    s = np.linalg.norm(w, axis=1)
    theta = np.arctan2(s, c)
    b = w / s[:, None]
    moment = np.sin(theta)[:, None] * v1 + (1.0 - np.cos(theta))[:, None] * b
    mid = v1 + v2
    mid /= np.linalg.norm(mid, axis=1)[:, None]
    return theta, moment, mid


def voronoi_mesh(N: int | None = None, centres=None, lloyd: int = 0) -> SphereMesh:
    r"""The Voronoi mesh of ``centres`` (default: :func:`fibonacci_sphere` ``(N)``).

    Parameters
    ----------
    N : int
        Number of cells (with the Fibonacci generators).
    centres : (N, 3) array, optional
        Generators (normalised here).
    lloyd : int
        Lloyd iterations: each moves every generator to the normalised area centroid of its
        cell, toward a centroidal Voronoi tessellation.

    Returns
    -------
    SphereMesh
    """
    from scipy.spatial import SphericalVoronoi

    c = fibonacci_sphere(N) if centres is None else np.asarray(centres, dtype=float)
    c = c / np.linalg.norm(c, axis=1)[:, None]
    for _ in range(int(lloyd)):
        sv = SphericalVoronoi(c, radius=1.0, center=np.zeros(3))
        sv.sort_vertices_of_regions()
        c = np.array([_centroid(sv.vertices[r], ck) for r, ck in zip(sv.regions, c)])
    sv = SphericalVoronoi(c, radius=1.0, center=np.zeros(3))
    sv.sort_vertices_of_regions()
    areas = sv.calculate_areas()
    owner: dict = {}
    for k, reg in enumerate(sv.regions):
        for a, b in zip(reg, reg[1:] + reg[:1]):
            owner.setdefault((min(a, b), max(a, b)), []).append(k)
    pairs, verts = [], []
    for (a, b), cells in owner.items():
        if len(cells) != 2:
            raise ValueError("voronoi_mesh: an edge is not shared by exactly two cells "
                             "(degenerate generators?)")
        i, j = sorted(cells)
        pairs.append((i, j))
        verts.append((a, b))
    edges = np.array(pairs, dtype=np.int64)
    verts = np.array(verts, dtype=np.int64)
    V = sv.vertices / np.linalg.norm(sv.vertices, axis=1)[:, None]
    theta, moment, mid = _arc(V[verts[:, 0]], V[verts[:, 1]])
    nrm = c[edges[:, 1]] - c[edges[:, 0]]
    nrm /= np.linalg.norm(nrm, axis=1)[:, None]
    return SphereMesh(c, areas, edges, theta, nrm, mid, moment, verts, V,
                      [list(r) for r in sv.regions])


def _centroid(vertices, center):
    r"""Normalised area centroid of a spherical polygon with vertices in order:
    :math:`\int_K p\,dA = \tfrac12 \sum_k \theta_k\, \hat n_k` with
    :math:`\hat n_k = v_k\times v_{k+1} / \lvert\cdot\rvert` and :math:`\theta_k` the arc
    angle (exact; the sign is fixed by ``center``, a point inside the cell)."""
    v1, v2 = vertices, np.roll(vertices, -1, axis=0)
    cr = np.cross(v1, v2)
    nn = np.linalg.norm(cr, axis=1)
    theta = np.arctan2(nn, np.einsum("ij,ij->i", v1, v2))
    acc = 0.5 * np.sum(theta[:, None] * cr / nn[:, None], axis=0)
    if np.dot(acc, center) < 0:
        acc = -acc
    return acc / np.linalg.norm(acc)


def edge_fluxes_linear(mesh: SphereMesh, A) -> np.ndarray:
    r"""Exact edge fluxes :math:`\phi_{ij} = \int_{\Gamma_{ij}}\langle Ap, n_{ij}\rangle d\ell
    = \langle A M_{ij}, n_{ij}\rangle` of the linear field :math:`u(p) = Ap` (tangent when
    A is antisymmetric: a solid-body rotation). Shape (E,)."""
    return np.einsum("ea,ab,eb->e", mesh.normals, np.asarray(A, dtype=float), mesh.moments)


def edge_fluxes_midpoint(mesh: SphereMesh, u_mid) -> np.ndarray:
    r"""Midpoint-rule edge fluxes :math:`\phi_{ij} \approx \lvert\Gamma_{ij}\rvert
    \langle u(m_{ij}), n_{ij}\rangle` from the field at the arc midpoints, ``u_mid`` (E, 3)."""
    return mesh.lengths * np.einsum("ea,ea->e", np.asarray(u_mid, dtype=float), mesh.normals)


def upwind_rhs(mesh: SphereMesh, rho, phi) -> np.ndarray:
    r""":math:`d\rho_i/dt = -\frac{1}{\lvert K_i\rvert}\sum_{j\sim i} F_{ij}` with first-order
    upwind fluxes :math:`F_{ij} = \phi^+_{ij}\rho_i - \phi^-_{ij}\rho_j`.

    ``rho``: (N,) or (P, N) cell averages; ``phi``: (E,) or (P, E) edge fluxes (i → j).
    """
    return _upwind(mesh, rho, phi)[1]


def _cell_sums(mesh: SphereMesh, into_i, into_j):
    """Per cell (..., N): the edge values (..., E) ``into_i`` summed into cell i of each edge
    plus ``into_j`` into cell j (one ``bincount`` over every leading index)."""
    lead = into_i.shape[:-1]
    m = int(np.prod(lead, dtype=np.int64))
    off = (np.arange(m) * mesh.N)[:, None]
    idx = np.concatenate([(mesh.edges[:, 0] + off).ravel(), (mesh.edges[:, 1] + off).ravel()])
    vals = np.concatenate([into_i.reshape(m, -1).ravel(), into_j.reshape(m, -1).ravel()])
    return np.bincount(idx, vals, m * mesh.N).reshape(*lead, mesh.N)


def _upwind(mesh: SphereMesh, rho, phi):
    r"""``(F, rate)``: the upwind fluxes (..., E) and :math:`\dot\rho` (..., N)."""
    rho = np.asarray(rho, dtype=float)
    phi = np.asarray(phi, dtype=float)
    i, j = mesh.edges[:, 0], mesh.edges[:, 1]
    F = np.maximum(phi, 0.0) * rho[..., i] + np.minimum(phi, 0.0) * rho[..., j]
    F = np.broadcast_to(F, np.broadcast_shapes(F.shape, rho.shape[:-1] + F.shape[-1:]))
    return F, -_cell_sums(mesh, F, -F) / mesh.areas


def cfl_dt(mesh: SphereMesh, phi, cfl: float = 0.9, nu: float = 0.0):
    r"""The largest step with :math:`\Delta t \sum_j \phi^{+}_{\text{out}, i} \le
    \text{cfl}\cdot\lvert K_i\rvert` for every cell (forward Euler then keeps ρ ≥ 0;
    SSP Runge–Kutta schemes inherit it). With diffusion ``nu`` > 0 (a number or one value
    per edge) the out-rate of a cell gains :math:`\sum_j \nu_{ij} w_{ij}`. ``phi`` (E,) gives
    a float, (P, E) one step per path."""
    phi = np.asarray(phi, dtype=float)
    out = _cell_sums(mesh, np.maximum(phi, 0.0), np.maximum(-phi, 0.0))
    if np.any(nu):  # a number, or one diffusivity per edge (P, E)
        nw = nu * mesh.diffusion_weights
        out = out + _cell_sums(mesh, nw, nw)
    rate = np.max(out / mesh.areas, axis=-1)
    with np.errstate(divide="ignore"):
        dt = np.where(rate > 0, cfl / np.where(rate > 0, rate, 1.0), np.inf)
    return float(dt) if dt.ndim == 0 else dt
