"""The architectures a trained checkpoint can be read from [model §5c]: for each, the names of
its tensors and configuration keys (:class:`Architecture`, the table :data:`ARCHITECTURES`), and
what marks a model with rotary position encodings (refused: no fixed D_h exists). A user adds an
architecture by adding an entry."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Architecture", "ARCHITECTURES", "ROTARY_MODEL_TYPES"]


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


