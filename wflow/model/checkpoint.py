"""Trained attention weights in: a safetensors checkpoint of GPT-2, BERT, RoBERTa, DistilBERT,
ALBERT, BART's encoder or OPT mapped onto the factored interactions, values, key logit weights and drift of
the token flow [model §5c].

For the LayerNorm in front of the attention of layer ℓ, with ``y = P₁x / sqrt(‖P₁x‖²/d + ε)
/ √d`` (``= u = P₁x/‖P₁x‖`` when ε = 0) and ``P₁ = I − 11ᵀ/d``, the attention sub-layer
output of the checkpoint is, exactly,

    out_i = Σ_h V_out,h V_in,h Σ_j π^h_ij y_j + c,
    π^h_ij ∝ exp((A_h y_i)ᵀ(B_h y_j) + w_hᵀ y_j)   (j ≤ i under the causal mask),

with ``A_h, B_h, V_in,h`` of shape (r, d), ``V_out,h`` (d_out, r), ``w_h`` (d,) and the
drift ``c`` (d_out,). :func:`load` reads a checkpoint, :func:`attention_update` evaluates
the sub-layer from these arrays in NumPy float64 (independently of the solver's kernels),
:func:`tokens_from_hidden` maps hidden states onto the token sphere.

The mapping table :data:`ARCHITECTURES` names the tensors of each architecture; a user adds
one by adding an entry (:class:`Architecture`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wflow.errors import ConfigError
from wflow.model.architectures import (  # noqa: F401 - the table, part of this module's API
    _ROTARY_CONFIG_KEYS,
    _ROTARY_NAMES,
    ARCHITECTURES,
    ROTARY_MODEL_TYPES,
    Architecture,
)
from wflow.model.imported_arrays import (  # noqa: F401 - part of this module's API
    ImportedLayer,
    ImportedModel,
    read_imported,
)

__all__ = ["Architecture", "ARCHITECTURES", "ImportedLayer", "ImportedModel", "load",
           "attention_update", "tokens_from_hidden", "read_imported", "ROTARY_MODEL_TYPES",
           "embedding_tokens"]


# ---------------------------------------------------------------------- reading
def _refuse_rotary(tensors, config, where):
    mt = str(config.get("model_type", "")).lower()
    keys = [k for k in _ROTARY_CONFIG_KEYS if k in config]
    name = next((k for k in tensors if _ROTARY_NAMES.search(k)), None)
    if mt in ROTARY_MODEL_TYPES or keys or name is not None:
        why = (f"model_type {mt!r}" if mt in ROTARY_MODEL_TYPES else
               f"config key {keys[0]!r}" if keys else f"tensor {name!r}")
        raise ConfigError(f"{where}: rotary position encodings ({why}) rotate queries and keys "
                          f"by position, so no fixed D_h exists; refused (known architectures: "
                          f"{', '.join(ARCHITECTURES)})")


def _detect(tensors, config, arch, where) -> tuple[str, str]:
    """(architecture, the prefix of its tensor names)."""
    if arch is None and config.get("model_type") not in (None, ""):
        mt = str(config["model_type"]).lower()
        if mt not in ARCHITECTURES:
            raise ConfigError(f"{where}: unknown architecture {mt!r} (model_type): known are "
                              f"{', '.join(ARCHITECTURES)}")
        arch = mt
    if arch is not None and arch not in ARCHITECTURES:
        raise ConfigError(f"{where}: unknown architecture {arch!r}: known are "
                          f"{', '.join(ARCHITECTURES)}")
    candidates = [arch] if arch is not None else list(ARCHITECTURES)
    for a in candidates:
        anchor = ARCHITECTURES[a].anchor
        for k in tensors:
            if k == anchor or k.endswith("." + anchor):
                return a, k[: len(k) - len(anchor)]
    if arch is not None:
        raise ConfigError(f"{where}: tensor {ARCHITECTURES[arch].anchor!r} missing: not a "
                          f"{arch} checkpoint")
    raise ConfigError(f"{where}: unknown architecture (no tensor names of "
                      f"{', '.join(ARCHITECTURES)}; give one with arch=/--arch)")


def _config_value(config, keys, what, given, where, default=None, kind=None):
    """The ``what`` of the checkpoint: ``given``, else the first of ``keys`` in
    ``config.json``, else ``default``; ``kind`` ``"count"`` (an integer >= 1) or ``"eps"``
    (a finite number >= 0) is checked, naming the key (one line)."""
    if given is not None:
        return _config_checked(given, kind, f"the given {what}", where)
    for k in keys:
        if k in config:
            return _config_checked(config[k], kind, f"config.json {k}", where)
    if default is not None:
        return default
    raise ConfigError(f"{where}: the {what} is not in the checkpoint (no config.json with "
                      f"{' or '.join(repr(k) for k in keys)} beside it); give it explicitly")


def _config_checked(value, kind, source, where):
    if kind is None:
        return value
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))
    if kind == "count":
        if not number or not float(value).is_integer() or value < 1:
            raise ConfigError(f"{where}: {source} = {value!r}: must be an integer >= 1")
        return int(value)
    if not number or not np.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: {source} = {value!r}: the LayerNorm epsilon must be a "
                          f"finite number >= 0")
    return float(value)


class _Tensors:
    def __init__(self, tensors, prefix, where):
        self.t, self.prefix, self.where = tensors, prefix, where

    def get(self, name, shape, keep_dtype=False) -> np.ndarray:
        full = self.prefix + name
        if full not in self.t:
            raise ConfigError(f"{self.where}: tensor {full!r} missing (expected shape "
                              f"{tuple(shape)})")
        a = self.t[full]
        if tuple(a.shape) != tuple(shape):
            raise ConfigError(f"{self.where}: tensor {full!r} has shape {tuple(a.shape)}, "
                              f"expected {tuple(shape)}")
        if not np.issubdtype(a.dtype, np.floating):
            raise ConfigError(f"{self.where}: tensor {full!r} has dtype {a.dtype}, expected "
                              f"floating point")
        a = np.asarray(a) if keep_dtype else np.asarray(a, dtype=np.float64)
        if not np.all(np.isfinite(a)):
            raise ConfigError(f"{self.where}: tensor {full!r} holds NaN or infinite values")
        return a


def _layer_count(tensors, prefix, spec, config, given, where) -> int:
    if given is not None or spec.shared:
        return _config_value(config, spec.layers_keys, "layer count", given, where,
                             kind="count")
    probe = spec.anchor.replace(".0.", ".{l}.", 1)
    n = 0
    while prefix + probe.format(l=n) in tensors:
        n += 1
    return n


def _one_door(path):
    from wflow.storage.checkpoint import read_checkpoint

    return read_checkpoint(path)


def load(path, arch: str | None = None, heads: int | None = None,
         layers: int | None = None) -> ImportedModel:
    """Read a safetensors checkpoint and map its attention layers [model §5c].

    ``D_h = A_hᵀ B_h = (d/√r) P₁ diag(γ) W_Q,hᵀ W_K,h diag(γ) P₁``,
    ``V_h = W_O,h · √d W_V,h diag(γ) P₁``, key logit weights
    ``w_h = (√d/√r) P₁ diag(γ) W_K,hᵀ (W_Q,h b + b_Q,h)`` and the drift
    ``c = b_O + Σ_h W_O,h (W_V,h b + b_V,h)``, with ``γ, b`` the LayerNorm in front of
    the attention.

    Parameters
    ----------
    path : path-like
        A ``.safetensors`` file or a folder with ``model.safetensors`` (and ``config.json``).
    arch : str, optional
        A key of :data:`ARCHITECTURES`; default: the ``model_type`` of ``config.json``, else
        found from the tensor names.
    heads, layers : int, optional
        The head and layer counts when ``config.json`` is absent (``layers``: default the
        layers present; required for a shared-layer model).

    Returns
    -------
    ImportedModel

    Raises
    ------
    ConfigError
        An unknown architecture, rotary position encodings, a missing or misshapen tensor,
        an unreadable file: one line.
    """
    tensors, config, where = _one_door(path)
    _refuse_rotary(tensors, config, where)
    name, prefix = _detect(tensors, config, arch, where)
    spec = ARCHITECTURES[name]
    for key, allowed in spec.requires.items():
        if key in config and config[key] not in allowed:
            raise ConfigError(f"{where}: config.json {key} = {config[key]!r}: the {name} mapping "
                              f"holds for {' or '.join(repr(a) for a in allowed)} only")
    T = _Tensors(tensors, prefix, where)
    nm = spec.names
    H = _config_value(config, spec.heads_keys, "head count", heads, where, kind="count")
    eps = _config_value(config, spec.eps_keys, "LayerNorm epsilon", None, where,
                        default=spec.eps_default, kind="eps")
    L = _layer_count(tensors, prefix, spec, config, layers, where)
    if L < 1:
        raise ConfigError(f"{where}: layer count {L}: must be at least 1")
    # the model width from the anchor: (d, 3d) fused Conv1D, (H r, d) Linear
    a0 = tensors[prefix + spec.anchor]
    d = int(a0.shape[0] if spec.fused_qkv else a0.shape[1])
    if H < 1 or d % H:
        raise ConfigError(f"{where}: width {d} is not divisible by the head count {H}")
    r = d // H
    out = []
    for ell in range(L):
        if spec.shared and ell >= 2:
            out.append(out[1])  # the same frozen weights
            continue
        fmt = {"l": ell, "p": ell - 1}
        if spec.fused_qkv:
            W = T.get(nm["qkv_w"].format(**fmt), (d, 3 * d)).T  # Conv1D: y = x W + b
            bias = T.get(nm["qkv_b"].format(**fmt), (3 * d,))
            Wq, Wk, Wv = W[:d], W[d:2 * d], W[2 * d:]
            bq, bv = bias[:d], bias[2 * d:]
            Wo = T.get(nm["o_w"].format(**fmt), (d, d)).T
        else:
            Wq, Wk, Wv = (T.get(nm[k].format(**fmt), (d, d)) for k in ("q_w", "k_w", "v_w"))
            bq, _, bv = (T.get(nm[k].format(**fmt), (d,)) for k in ("q_b", "k_b", "v_b"))
            Wo = T.get(nm["o_w"].format(**fmt), (d, d))
        bo = T.get(nm["o_b"].format(**fmt), (d,))
        first = ell == 0 and "ln0_w" in nm
        lw, lb = ("ln0_w", "ln0_b") if first else ("ln_w", "ln_b")
        if first and "proj0_w" in nm:  # ALBERT: LayerNorm (width E), then a linear map E -> d
            Pw = tensors.get(prefix + nm["proj0_w"].format(**fmt))
            e = int(Pw.shape[1]) if Pw is not None and Pw.ndim == 2 else d
            M = T.get(nm["proj0_w"].format(**fmt), (d, e))
            m = T.get(nm["proj0_b"].format(**fmt), (d,))
        else:
            e, M, m = d, None, None
        gamma = T.get(nm[lw].format(**fmt), (e,))
        beta = T.get(nm[lb].format(**fmt), (e,))
        scale = (spec.logit_scale or _default_scale)(config, ell, r)
        out.append(_finite_layer(
            _map_layer(Wq, Wk, Wv, bq, bv, Wo, bo, gamma, beta, M, m, H, eps, scale), ell,
            where))
    return ImportedModel(name, out, spec.causal, spec.placement, H, r, spec.shared,
                         "/".join(Path(str(where)).parts[-2:]), meta={"config": config},
                         embeddings=_embeddings(T, spec, d, config, where))


def _embeddings(T, spec, d, config, where) -> dict | None:
    """The input embeddings of :attr:`Architecture.embed` (rows of width d), or None when
    the checkpoint does not hold them (a bare attention checkpoint, ALBERT's factored
    embeddings, OPT's projected ones)."""
    e = spec.embed
    if not e or e.get("refuse", "") and T.prefix + e["refuse"] in T.t:
        return None
    names = [T.prefix + e[k] for k in ("tokens", "positions", "type") if k in e]
    if not all(n in T.t and T.t[n].ndim == 2 and T.t[n].shape[1] == d for n in names):
        return None
    # the tables in their stored precision (a float32 vocabulary stays half the size)
    tok = T.get(e["tokens"], T.t[names[0]].shape, keep_dtype=True)
    pos = T.get(e["positions"], T.t[names[1]].shape, keep_dtype=True)
    extra = T.get(e["type"], T.t[names[2]].shape)[0] if "type" in e else np.zeros(d)
    if "scale_key" in e and config.get(e["scale_key"], False):  # BART's √d on the token rows
        tok = np.sqrt(d) * np.asarray(tok, dtype=np.float64)
    out = {"tokens": tok, "positions": pos, "extra": extra, "offset": int(e.get("offset", 0)),
           "pad": -1}
    if "pad_key" in e:
        q = _config_value(config, (e["pad_key"],), "padding id", None, where, default=1)
        if isinstance(q, bool) or not isinstance(q, int) or not 0 <= q < len(pos):
            raise ConfigError(f"{where}: config.json {e['pad_key']} = {q!r}: must be a row of "
                              f"the position embeddings (0..{len(pos) - 1})")
        out["pad"], out["offset"] = q, q + 1
    return out


def _finite_layer(lay, ell, where) -> ImportedLayer:
    """``lay``, unless a mapped array, β_h or the antisymmetric fraction is not finite (the
    products of huge finite weights overflow float64): one ConfigError line naming the
    layer."""
    with np.errstate(all="ignore"):
        for name in ("A", "B", "V_in", "V_out", "key_bias", "drift"):
            if not np.all(np.isfinite(getattr(lay, name))):
                raise ConfigError(f"{where}: layer {ell}: the mapped {name} overflows float64 "
                                  f"(weights too large for the mapping of docs/model.md §5c)")
        D = [lay.interaction(h) for h in range(len(lay.A))]
        norms = np.array([np.linalg.norm(x) for x in D])
        if not np.all(np.isfinite(norms)):
            raise ConfigError(f"{where}: layer {ell}: D_h = A_hᵀB_h overflows float64 "
                              f"(weights too large for the mapping of docs/model.md §5c)")
    return lay


def _default_scale(config, layer, r) -> float:
    return r ** -0.5


def _map_layer(Wq, Wk, Wv, bq, bv, Wo, bo, gamma, beta, M, m, H, eps, scale) -> ImportedLayer:
    """The exact mapping of one attention sub-layer [model §5c]: the LayerNorm output is
    ``G y + g`` with ``G = √e M diag(γ)``, ``g = M b + m`` (``M = I``, ``m = 0`` unless an
    embedding projection follows the LayerNorm); ``scale`` is the logit factor (``1/√r``)."""
    e = gamma.shape[0]
    G = np.sqrt(e) * gamma[None, :] * (np.eye(e) if M is None else M)
    g = beta if M is None else M @ beta + m
    G = G - G.mean(axis=1, keepdims=True)  # G P₁: y lies in 1^⊥
    d = Wq.shape[0]
    r = d // H
    s = np.sqrt(scale)
    # the key bias W_K g + b_K only shifts each query's logits by a constant: it cancels
    bq_t, bv_t = Wq @ g + bq, Wv @ g + bv
    A = (s * (Wq @ G)).reshape(H, r, e)
    B = (s * (Wk @ G)).reshape(H, r, e)
    V_in = (Wv @ G).reshape(H, r, e)
    V_out = Wo.reshape(Wo.shape[0], H, r).transpose(1, 0, 2).copy()
    key_bias = np.einsum("hre,hr->he", B, s * bq_t.reshape(H, r))
    drift = bo + Wo @ bv_t
    return ImportedLayer(A, B, V_in, V_out, key_bias, drift, float(eps))


# ---------------------------------------------------------------------- evaluation
def tokens_from_hidden(X, eps: float = 0.0) -> np.ndarray:
    """``y = P₁x / sqrt(‖P₁x‖²/d + ε) / √d``: hidden states to tokens on the unit sphere of
    ``1^⊥`` (ε = 0: ``u = P₁x/‖P₁x‖``; ε > 0: ``ρ u`` with ``ρ = ‖P₁x‖/sqrt(‖P₁x‖² + dε)``,
    the LayerNorm's exact scale).

    Parameters
    ----------
    X : array_like, shape (..., d)
        Hidden states (the input of a LayerNorm).
    eps : float
        The LayerNorm ε; 0 gives unit vectors (the ``init.tokens_file`` of a run).
    """
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[-1]
    Y = X - X.mean(axis=-1, keepdims=True)
    sq = np.sum(Y * Y, axis=-1, keepdims=True)
    if eps == 0.0 and np.any(sq == 0):
        raise ConfigError("a hidden state is constant: P₁x = 0 has no direction on the sphere")
    return Y / np.sqrt(sq + d * eps)


def embedding_tokens(imported: ImportedModel, ids) -> np.ndarray:
    """``y_i = P₁x_i/‖P₁x_i‖`` with ``x_i = E[id_i] + P[o + i] + e``: the model's own input
    embeddings of a token-id sequence (token row, learned absolute position ``i`` from the
    offset ``o`` (RoBERTa: the rows of :attr:`Architecture.embed`'s ``pad_key``), BERT's
    token-type row 0 ``e``) through the first layer's LayerNorm map
    (:func:`tokens_from_hidden` with ε = 0) [model §5c].

    Parameters
    ----------
    imported : ImportedModel
        With its :attr:`~ImportedModel.embeddings`.
    ids : sequence of int
        The token ids, in ``[0, V)``, at most ``P − o`` of them.

    Returns
    -------
    ndarray, shape (len(ids), d)
        Unit rows in ``1^⊥``.
    """
    e = imported.embeddings
    if e is None:
        raise ConfigError(f"the {imported.arch} import holds no input embeddings (not in "
                          f"the checkpoint, or not a sum of token and position rows): set "
                          f"init.imported_tokens = 'uniform'")
    ids = np.asarray(ids)
    V, n_pos = e["tokens"].shape[0], e["positions"].shape[0] - e["offset"]
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ConfigError(f"init.token_ids: expected a non-empty list of integer ids, got "
                          f"{ids.tolist()!r}")
    if ids.min() < 0 or ids.max() >= V:
        raise ConfigError(f"init.token_ids: id {int(ids[(ids < 0) | (ids >= V)][0])} is outside "
                          f"the vocabulary [0, {V})")
    if len(ids) > n_pos:
        raise ConfigError(f"init.token_ids: {len(ids)} ids, the model has {n_pos} positions")
    rows = e["offset"] + np.arange(len(ids))
    if e.get("pad", -1) >= 0:  # RoBERTa: padding ids do not count, and sit at row q
        real = ids != e["pad"]
        rows = np.cumsum(real) * real + e["pad"]
    X = (np.asarray(e["tokens"][ids], dtype=np.float64)
         + np.asarray(e["positions"][rows], dtype=np.float64) + e["extra"][None, :])
    return tokens_from_hidden(X)


def attention_update(imported: ImportedModel, layer: int, X_hidden, tokens: bool = False):
    """``out_i = Σ_h V_out,h V_in,h Σ_j π^h_ij y_j + c`` with
    ``π^h_ij ∝ exp((A_h y_i)ᵀ(B_h y_j) + w_hᵀ y_j)`` (``j ≤ i`` when causal) [model §5c]:
    the attention sub-layer's output (before the residual add) in NumPy float64.

    Parameters
    ----------
    imported : ImportedModel
    layer : int
        The layer ℓ.
    X_hidden : array_like, shape (n, d)
        The hidden states entering the LayerNorm in front of layer ℓ's attention (GPT-2: the
        residual stream, input of ``ln_1``; BERT/ALBERT: the input of the previous
        LayerNorm), mapped by :func:`tokens_from_hidden` with the checkpoint's ε; or, with
        ``tokens=True``, tokens ``y`` themselves (unit vectors of ``1^⊥`` for ε = 0).

    Returns
    -------
    ndarray, shape (n, d_out)
    """
    lay = imported.layers[layer]
    X = np.asarray(X_hidden, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != lay.d:
        raise ConfigError(f"layer {layer}: hidden states of shape {X.shape}, expected "
                          f"(n, {lay.d})")
    Y = X if tokens else tokens_from_hidden(X, lay.eps)
    n = Y.shape[0]
    out = np.broadcast_to(lay.drift, (n, lay.drift.shape[0])).copy()
    mask = imported.mask(n)
    for h in range(len(lay.A)):
        S = (Y @ lay.A[h].T) @ (Y @ lay.B[h].T).T + (Y @ lay.key_bias[h])[None, :]
        if mask is not None:
            S = np.where(mask, S, -np.inf)
        S -= S.max(axis=1, keepdims=True)
        P = np.exp(S)
        P /= P.sum(axis=1, keepdims=True)
        out += (P @ (Y @ lay.V_in[h].T)) @ lay.V_out[h].T
    return out
