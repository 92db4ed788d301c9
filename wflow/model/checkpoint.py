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

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wflow.errors import ConfigError

__all__ = ["Architecture", "ARCHITECTURES", "ImportedLayer", "ImportedModel", "load",
           "attention_update", "tokens_from_hidden", "read_imported", "ROTARY_MODEL_TYPES",
           "embedding_tokens"]


# ---------------------------------------------------------------------- the mapping table
@dataclass(frozen=True)
class Architecture:
    """How one architecture names its attention tensors.

    Names hold ``{l}`` (the layer) and ``{p}`` (the layer before); they are looked up after
    the checkpoint's common prefix (``transformer.``, ``bert.``, ...) is found from
    ``anchor``. ``fused_qkv`` (GPT-2's ``c_attn``, a ``Conv1D``: ``y = x W + b`` with ``W``
    of shape (d, 3d)) or the separate ``query``/``key``/``value`` of ``torch.nn.Linear``
    (``y = W x + b``, ``W`` of shape (out, in)).

    Attributes
    ----------
    names : dict
        Role -> tensor name: ``qkv_w``, ``qkv_b`` (fused) or ``q_w``, ``q_b``, ``k_w``,
        ``k_b``, ``v_w``, ``v_b``; ``o_w``, ``o_b`` (output projection); ``ln_w``, ``ln_b``
        (the LayerNorm in front of the attention) and ``ln0_w``, ``ln0_b`` for layer 0 when
        it differs (post-LN: the embeddings' LayerNorm); ``proj0_w``, ``proj0_b``: a linear
        map between that LayerNorm and layer 0 (ALBERT's embedding projection).
    anchor : str
        A name every checkpoint of the architecture holds (with ``{l}`` = 0).
    placement : str
        ``"pre"`` (the LayerNorm of the block, then attention, then the residual add) or
        ``"post"`` (attention reads the previous LayerNorm's output).
    causal : bool
        The causal mask.
    eps_keys, heads_keys, layers_keys : tuple of str
        The ``config.json`` keys of the LayerNorm ε, the head count and the layer count.
    eps_default : float
        ε when the checkpoint has no ``config.json``.
    shared : bool
        One set of attention weights for every layer (ALBERT): frozen weights.
    requires : dict
        ``config.json`` key -> the values the mapping holds for (a missing key passes);
        any other value is refused (e.g. relative position embeddings).
    logit_scale : callable, optional
        ``(config, layer, r) -> float``, the factor of ``q·k`` in the logits; default
        ``1/√r``.
    embed : dict
        The input embeddings: ``tokens`` (the token rows), ``positions`` (learned absolute
        positions), optionally ``type`` (whose row 0 every token gains, BERT's token types);
        ``offset``: the row of position 0 in ``positions`` (OPT, BART: 2); ``scale_key``: the
        ``config.json`` switch of a factor √d on the token rows (BART); or ``pad_key``: the
        ``config.json`` key of the padding id ``q`` (RoBERTa: token i sits at position row
        ``q + #{non-padding ids among 0..i}``, a padding id at row ``q``). Stored in the
        ``.npz`` when the checkpoint holds them, for ``init.imported_tokens = "ids"``.
    """

    names: dict
    anchor: str
    placement: str
    causal: bool
    eps_keys: tuple = ("layer_norm_epsilon", "layer_norm_eps")
    heads_keys: tuple = ("n_head", "num_attention_heads")
    layers_keys: tuple = ("n_layer", "num_hidden_layers")
    eps_default: float = 1e-5
    shared: bool = False
    requires: dict = field(default_factory=dict)
    logit_scale: object = None
    embed: dict = field(default_factory=dict)

    @property
    def fused_qkv(self) -> bool:
        return "qkv_w" in self.names


def _gpt2_scale(config, layer, r) -> float:
    """GPT-2's logit factor: ``1/√r`` (unless ``scale_attn_weights`` is false), divided by
    ``ℓ + 1`` under ``scale_attn_by_inverse_layer_idx``."""
    s = r ** -0.5 if config.get("scale_attn_weights", True) else 1.0
    return s / (layer + 1) if config.get("scale_attn_by_inverse_layer_idx", False) else s


_BERT_SELF = "encoder.layer.{l}.attention.self."
_ALBERT_LAYER = "encoder.albert_layer_groups.0.albert_layers.0."
_OPT_ATTN = "decoder.layers.{l}.self_attn."
_DISTIL = "transformer.layer.{l}.attention."
_BART = "encoder.layers.{l}.self_attn."
_BERT_NAMES = {"q_w": _BERT_SELF + "query.weight", "q_b": _BERT_SELF + "query.bias",
               "k_w": _BERT_SELF + "key.weight", "k_b": _BERT_SELF + "key.bias",
               "v_w": _BERT_SELF + "value.weight", "v_b": _BERT_SELF + "value.bias",
               "o_w": "encoder.layer.{l}.attention.output.dense.weight",
               "o_b": "encoder.layer.{l}.attention.output.dense.bias",
               "ln0_w": "embeddings.LayerNorm.weight", "ln0_b": "embeddings.LayerNorm.bias",
               "ln_w": "encoder.layer.{p}.output.LayerNorm.weight",
               "ln_b": "encoder.layer.{p}.output.LayerNorm.bias"}

#: the known architectures (extend with an :class:`Architecture` entry)
ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": Architecture(
        names={"qkv_w": "h.{l}.attn.c_attn.weight", "qkv_b": "h.{l}.attn.c_attn.bias",
               "o_w": "h.{l}.attn.c_proj.weight", "o_b": "h.{l}.attn.c_proj.bias",
               "ln_w": "h.{l}.ln_1.weight", "ln_b": "h.{l}.ln_1.bias"},
        anchor="h.0.attn.c_attn.weight", placement="pre", causal=True, eps_default=1e-5,
        requires={"add_cross_attention": (False,)}, logit_scale=_gpt2_scale,
        embed={"tokens": "wte.weight", "positions": "wpe.weight", "offset": 0}),
    "bert": Architecture(
        names=_BERT_NAMES,
        anchor=_BERT_SELF.format(l=0) + "query.weight", placement="post", causal=False,
        eps_default=1e-12, requires={"position_embedding_type": ("absolute",),
                                     "is_decoder": (False,)},
        embed={"tokens": "embeddings.word_embeddings.weight",
               "positions": "embeddings.position_embeddings.weight",
               "type": "embeddings.token_type_embeddings.weight", "offset": 0}),
    "albert": Architecture(
        names={"q_w": _ALBERT_LAYER + "attention.query.weight",
               "q_b": _ALBERT_LAYER + "attention.query.bias",
               "k_w": _ALBERT_LAYER + "attention.key.weight",
               "k_b": _ALBERT_LAYER + "attention.key.bias",
               "v_w": _ALBERT_LAYER + "attention.value.weight",
               "v_b": _ALBERT_LAYER + "attention.value.bias",
               "o_w": _ALBERT_LAYER + "attention.dense.weight",
               "o_b": _ALBERT_LAYER + "attention.dense.bias",
               "ln0_w": "embeddings.LayerNorm.weight", "ln0_b": "embeddings.LayerNorm.bias",
               "proj0_w": "encoder.embedding_hidden_mapping_in.weight",
               "proj0_b": "encoder.embedding_hidden_mapping_in.bias",
               "ln_w": _ALBERT_LAYER + "full_layer_layer_norm.weight",
               "ln_b": _ALBERT_LAYER + "full_layer_layer_norm.bias"},
        anchor=_ALBERT_LAYER + "attention.query.weight", placement="post", causal=False,
        eps_default=1e-12, shared=True,
        requires={"position_embedding_type": ("absolute",), "num_hidden_groups": (1,),
                  "inner_group_num": (1,)}),
    "roberta": Architecture(
        names=_BERT_NAMES, anchor=_BERT_SELF.format(l=0) + "query.weight", placement="post",
        causal=False, eps_default=1e-5,
        requires={"position_embedding_type": ("absolute",), "is_decoder": (False,)},
        embed={"tokens": "embeddings.word_embeddings.weight",
               "positions": "embeddings.position_embeddings.weight",
               "type": "embeddings.token_type_embeddings.weight", "pad_key": "pad_token_id"}),
    "distilbert": Architecture(
        names={"q_w": _DISTIL + "q_lin.weight", "q_b": _DISTIL + "q_lin.bias",
               "k_w": _DISTIL + "k_lin.weight", "k_b": _DISTIL + "k_lin.bias",
               "v_w": _DISTIL + "v_lin.weight", "v_b": _DISTIL + "v_lin.bias",
               "o_w": _DISTIL + "out_lin.weight", "o_b": _DISTIL + "out_lin.bias",
               "ln0_w": "embeddings.LayerNorm.weight", "ln0_b": "embeddings.LayerNorm.bias",
               "ln_w": "transformer.layer.{p}.output_layer_norm.weight",
               "ln_b": "transformer.layer.{p}.output_layer_norm.bias"},
        anchor=_DISTIL.format(l=0) + "q_lin.weight", placement="post", causal=False,
        eps_keys=(), eps_default=1e-12, heads_keys=("n_heads",), layers_keys=("n_layers",),
        embed={"tokens": "embeddings.word_embeddings.weight",
               "positions": "embeddings.position_embeddings.weight", "offset": 0}),
    "bart": Architecture(  # the encoder (the decoder's cross-attention is no self-attention)
        names={"q_w": _BART + "q_proj.weight", "q_b": _BART + "q_proj.bias",
               "k_w": _BART + "k_proj.weight", "k_b": _BART + "k_proj.bias",
               "v_w": _BART + "v_proj.weight", "v_b": _BART + "v_proj.bias",
               "o_w": _BART + "out_proj.weight", "o_b": _BART + "out_proj.bias",
               "ln0_w": "encoder.layernorm_embedding.weight",
               "ln0_b": "encoder.layernorm_embedding.bias",
               "ln_w": "encoder.layers.{p}.final_layer_norm.weight",
               "ln_b": "encoder.layers.{p}.final_layer_norm.bias"},
        anchor=_BART.format(l=0) + "q_proj.weight", placement="post", causal=False,
        eps_keys=(), eps_default=1e-5, heads_keys=("encoder_attention_heads",),
        layers_keys=("encoder_layers",),
        embed={"tokens": "shared.weight", "positions": "encoder.embed_positions.weight",
               "offset": 2, "scale_key": "scale_embedding"}),
    "opt": Architecture(
        names={"q_w": _OPT_ATTN + "q_proj.weight", "q_b": _OPT_ATTN + "q_proj.bias",
               "k_w": _OPT_ATTN + "k_proj.weight", "k_b": _OPT_ATTN + "k_proj.bias",
               "v_w": _OPT_ATTN + "v_proj.weight", "v_b": _OPT_ATTN + "v_proj.bias",
               "o_w": _OPT_ATTN + "out_proj.weight", "o_b": _OPT_ATTN + "out_proj.bias",
               "ln_w": "decoder.layers.{l}.self_attn_layer_norm.weight",
               "ln_b": "decoder.layers.{l}.self_attn_layer_norm.bias"},
        anchor=_OPT_ATTN.format(l=0) + "q_proj.weight", placement="pre", causal=True,
        eps_keys=(), eps_default=1e-5,
        requires={"do_layer_norm_before": (True,), "enable_bias": (True,),
                  "layer_norm_elementwise_affine": (True,)},
        embed={"tokens": "decoder.embed_tokens.weight",
               "positions": "decoder.embed_positions.weight", "offset": 2,
               "refuse": "decoder.project_in.weight"}),
}

#: model types whose attention rotates queries and keys by position (no fixed D_h)
ROTARY_MODEL_TYPES = ("gpt_neox", "gptj", "llama", "mistral", "mixtral", "qwen2", "qwen3",
                      "phi", "phi3", "gemma", "gemma2", "falcon", "olmo", "stablelm", "rope")
_ROTARY_CONFIG_KEYS = ("rotary_pct", "rotary_dim", "rotary_emb_base", "rope_theta",
                       "rope_scaling", "rope_parameters", "partial_rotary_factor")
#: tensors that exist only in rotary models (the frequency buffers)
_ROTARY_NAMES = re.compile(r"(rotary_emb|\brope\b|inv_freq)")


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
