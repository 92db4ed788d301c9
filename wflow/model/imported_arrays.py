"""The arrays of an imported model [model §5c]: per layer the factored interactions A_h, B_h,
the values V_in,h, V_out,h, the key logit weights w_h and the drift c (:class:`ImportedLayer`),
the model's layers and embeddings (:class:`ImportedModel`), and the ``.npz`` that
``wflow import-weights`` writes, read back and checked array by array (:func:`read_imported`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wflow.errors import ConfigError

__all__ = ["ImportedLayer", "ImportedModel", "read_imported"]


# ---------------------------------------------------------------------- the imported arrays
@dataclass
class ImportedLayer:
    """The attention of one layer on the token sphere [model §5c].

    Attributes
    ----------
    A, B : ndarray, shape (H, r, d)
        ``D_h = A_hᵀ B_h`` (the scale ``1/√r`` and the LayerNorm gain folded in, ``P₁`` on
        the right).
    V_in : ndarray, shape (H, r, d)
        ``√d W_V,h diag(γ) P₁`` (with the embedding projection of ALBERT's layer 0).
    V_out : ndarray, shape (H, d_out, r)
        ``W_O,h``; the value matrix is ``V_h = V_out,h V_in,h``.
    key_bias : ndarray, shape (H, d)
        ``w_h``: the logit of key ``j`` gains ``w_hᵀ y_j``.
    drift : ndarray, shape (d_out,)
        The constant ``c`` added to every token's update.
    eps : float
        The LayerNorm ε of the LayerNorm in front of the attention.
    """

    A: np.ndarray
    B: np.ndarray
    V_in: np.ndarray
    V_out: np.ndarray
    key_bias: np.ndarray
    drift: np.ndarray
    eps: float

    @property
    def d(self) -> int:
        return int(self.A.shape[2])

    def interaction(self, h: int) -> np.ndarray:
        """``D_h = A_hᵀ B_h``, shape (d, d)."""
        return self.A[h].T @ self.B[h]

    def values(self, h: int) -> np.ndarray:
        """``V_h = V_out,h V_in,h``, shape (d_out, d)."""
        return self.V_out[h] @ self.V_in[h]

    def beta(self) -> np.ndarray:
        """``β_h = ‖D_h‖₂``: the largest logit spread ``max |u_iᵀ D_h u_j|`` on the unit
        sphere, the effective inverse temperature of the head; shape (H,)."""
        out = []
        for h in range(len(self.A)):  # ‖A_hᵀB_h‖₂ = ‖R_A R_Bᵀ‖₂ from Aᵀ = Q_A R_A, Bᵀ = Q_B R_B
            ra = np.linalg.qr(self.A[h].T, mode="r")
            rb = np.linalg.qr(self.B[h].T, mode="r")
            out.append(np.linalg.norm(ra @ rb.T, 2))
        return np.array(out)

    def antisymmetry(self) -> np.ndarray:
        """``‖D_h − D_hᵀ‖_F / (2‖D_h‖_F)`` in [0, 1] (0: symmetric, 1: antisymmetric; NaN
        for ``D_h = 0``); shape (H,)."""
        out = []
        for h in range(len(self.A)):
            D = self.interaction(h)
            nf = np.linalg.norm(D)
            out.append(np.linalg.norm(D - D.T) / (2 * nf) if nf > 0 else np.nan)
        return np.array(out)


@dataclass
class ImportedModel:
    """The attention layers of a checkpoint [model §5c].

    Attributes
    ----------
    arch : str
        The architecture (a key of :data:`ARCHITECTURES`).
    layers : list of ImportedLayer
        Layer ℓ's attention (ALBERT: layers 1, 2, ... are one shared set of weights).
    causal : bool
        The causal mask (token i attends to j ≤ i).
    placement : str
        ``"pre"`` or ``"post"`` LayerNorm.
    heads, head_dim : int
        H and r.
    shared : bool
        Shared (frozen) weights across layers.
    source : str
        The checkpoint's file name and its folder's name (no full path).
    embeddings : dict or None
        The input embeddings (``tokens`` (V, d), ``positions`` (P, d), ``extra`` (d,) added
        to every token, ``offset`` the row of position 0), or None: see
        :func:`embedding_tokens`.
    """

    arch: str
    layers: list
    causal: bool
    placement: str
    heads: int
    head_dim: int
    shared: bool = False
    source: str = ""
    meta: dict = field(default_factory=dict)
    embeddings: dict | None = None

    def mask(self, n: int) -> np.ndarray | None:
        """The attention mask for ``n`` tokens: ``M_ij = [j ≤ i]`` (causal), or None."""
        return np.tril(np.ones((n, n), dtype=bool)) if self.causal else None

    def table(self) -> str:
        """One row per layer and head: β_h, the antisymmetric fraction, ‖w_h‖ and ‖c‖."""
        rows = [f"{'layer':>5} {'head':>4} {'beta':>11} {'antisym':>9} {'|key_bias|':>11} "
                f"{'|drift|':>10}"]
        for ell, lay in enumerate(self.layers):
            beta, anti = lay.beta(), lay.antisymmetry()
            dn = np.linalg.norm(lay.drift)
            for h in range(self.heads):
                rows.append(f"{ell:>5} {h:>4} {beta[h]:>11.5g} {anti[h]:>9.4f} "
                            f"{np.linalg.norm(lay.key_bias[h]):>11.5g} {dn:>10.4g}")
        return "\n".join(rows)

    def arrays(self) -> dict:
        """The arrays of the ``.npz`` file: ``layer{ℓ}/A`` ... per layer, and the metadata."""
        out = {"arch": np.array(self.arch), "causal": np.array(self.causal),
               "placement": np.array(self.placement), "heads": np.array(self.heads),
               "head_dim": np.array(self.head_dim), "shared": np.array(self.shared),
               "n_layers": np.array(len(self.layers)), "source": np.array(self.source)}
        for ell, lay in enumerate(self.layers):
            for k in ("A", "B", "V_in", "V_out", "key_bias", "drift"):
                out[f"layer{ell}/{k}"] = getattr(lay, k)
            out[f"layer{ell}/eps"] = np.array(lay.eps)
            out[f"layer{ell}/beta"] = lay.beta()
            out[f"layer{ell}/antisymmetry"] = lay.antisymmetry()
        if self.embeddings is not None:
            for k, v in self.embeddings.items():
                out[f"embed/{k}"] = np.asarray(v)
        return out

    def save(self, path) -> Path:
        """Write :meth:`arrays` to ``path`` (``.npz``) through a temporary name: nothing
        half-written is left under the final name."""
        from wflow.storage.files import replacing, write_error

        path = Path(path)
        if path.suffix.lower() != ".npz":
            raise ConfigError(f"{path}: output suffix {path.suffix!r}: allowed is '.npz'")
        try:
            with replacing(path) as tmp:
                np.savez(tmp, **self.arrays())
        except OSError as exc:
            raise write_error(path, exc) from None
        return path


def read_imported(path) -> ImportedModel:
    """An :class:`ImportedModel` from the ``.npz`` file :meth:`ImportedModel.save` wrote.

    Every array is checked here, before a run starts: its shape against the head count,
    head size and width, its values finite, ``eps`` a finite number >= 0; a failure is one
    ConfigError line naming the file and the array."""
    with np.load(path, allow_pickle=False) as f:
        a = {k: f[k] for k in f.files}
    try:
        n_layers, H, r = int(a["n_layers"]), int(a["heads"]), int(a["head_dim"])
        layers = []
        for ell in range(n_layers):
            arrays = [_imported_array(path, a, f"layer{ell}/{k}")
                      for k in ("A", "B", "V_in", "V_out", "key_bias", "drift", "eps")]
            _check_layer_shapes(path, ell, H, r, *arrays[:6])
            eps = float(arrays[6])
            if arrays[6].shape != () or eps < 0:
                raise ConfigError(f"{path}: array 'layer{ell}/eps' = {arrays[6]!r}: the "
                                  f"LayerNorm epsilon must be one number >= 0")
            layers.append(ImportedLayer(*arrays[:6], eps=eps))
        embeddings = None
        if "embed/tokens" in a:
            embeddings = {k: _imported_array(path, a, f"embed/{k}")
                          for k in ("tokens", "positions", "extra")}
            embeddings["offset"] = int(a["embed/offset"])
            embeddings["pad"] = int(a["embed/pad"]) if "embed/pad" in a else -1
            d_out = layers[0].V_out.shape[1] if layers else 0
            for k in ("tokens", "positions"):
                x = embeddings[k]
                if x.ndim != 2 or x.shape[1] != d_out:
                    raise ConfigError(f"{path}: array 'embed/{k}' has shape {x.shape}, "
                                      f"expected (rows, {d_out})")
        return ImportedModel(str(a["arch"]), layers, bool(a["causal"]), str(a["placement"]),
                             H, r, bool(a["shared"]), str(a["source"]), embeddings=embeddings)
    except KeyError as exc:
        raise ConfigError(f"{path}: not an imported-weights file (array {exc} missing)") from None


def _imported_array(path, a, name) -> np.ndarray:
    """Array ``name`` of an imported-weights file: real, finite (else one line)."""
    x = a[name]
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise ConfigError(f"{path}: array {name!r} has dtype {x.dtype}, expected real numbers")
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ConfigError(f"{path}: array {name!r} holds NaN or infinite values "
                          f"({int(np.sum(~np.isfinite(x)))} of {x.size})")
    return x


def _check_layer_shapes(path, ell, H, r, A, B, V_in, V_out, key_bias, drift):
    d = A.shape[-1] if A.ndim else -1
    d_out = V_out.shape[1] if V_out.ndim == 3 else -1
    want = {"A": (H, r, d), "B": (H, r, d), "V_in": (H, r, d), "V_out": (H, d_out, r),
            "key_bias": (H, d), "drift": (d_out,)}
    for name, x in zip(want, (A, B, V_in, V_out, key_bias, drift)):
        if x.shape != want[name]:
            raise ConfigError(f"{path}: array 'layer{ell}/{name}' has shape {x.shape}, "
                              f"expected {want[name]} ({H} heads of size {r})")


