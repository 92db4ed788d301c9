r"""An imported model as a run [model §5c]: the layers of ``wflow import-weights`` as a
piecewise-constant weight process, layer :math:`\ell` on :math:`t \in [\ell, \ell + 1)`.

.. math::

    \dot u_i = P_{u_i}\Big(P_1 c_\ell + \sum_h P_1 V_{\ell h}\sum_j \pi^h_{ij} u_j\Big),\qquad
    \pi^h_{ij} \propto e^{\beta u_i^\top D_{\ell h} u_j + w_{\ell h}^\top u_j},

with :math:`D_{\ell h} = A_{\ell h}^\top B_{\ell h}` the weight state and the values, the key
logit weights :math:`w_{\ell h}` and the drift :math:`c_\ell` functions of it (the layer whose
:math:`D` the state holds). :meth:`ImportedLayers.attach_model` wraps the run's attention model
so that each evaluation takes its layer's values, key weights and drift.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, fields
from dataclasses import field as dc_field

import numpy as np

from wflow.errors import ConfigError
from wflow.kernels.reference import Factored, field_reference
from wflow.model.attention import AttentionModel, Field
from wflow.model.processes.layers import Layers
from wflow.model.processes.registry import register_process
from wflow.model.weights import _GENERAL
from wflow.params import Choice, Custom, Param, Path, When, bad, declare, is_int, typename

__all__ = ["ImportedLayers", "ImportedFlowModel", "initial_tokens", "IMPORTED_STARTS"]

#: |Σ_a x_a| of an initial token in 1^⊥ (tokens_from_hidden gives ~1e-16; float32 files pass)
PERP_TOL = 1e-6


def _imported_rule(cfg):
    w = cfg["weights"]
    if w["process"] == "imported" and not w["imported"].strip():
        raise bad("weights.imported", w["imported"], "must name the .npz file of "
                  "'wflow import-weights' when weights.process = 'imported'")


def _read(path):
    """The :class:`~wflow.model.checkpoint.ImportedModel` of ``path``; one line otherwise."""
    from wflow.model.checkpoint import read_imported

    where = f"weights.imported = {str(path)!r}"
    try:
        return read_imported(path)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {str(exc).split(': ', 1)[-1]}") from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ConfigError(f"{where}: cannot read it as the .npz of 'wflow import-weights' "
                          f"({type(exc).__name__}: {exc})") from None


@register_process
class ImportedLayers(Layers):
    r"""The layers of an imported checkpoint, layer :math:`\ell` on :math:`[\ell, \ell + 1)`.

    .. math::

        D_h(t) = A_{\ell h}^\top B_{\ell h},\quad \ell = \min(\lfloor t\rfloor, L - 1),\qquad
        (V_h, w_h, c)(t) = \big(P_1 V_{{\rm out},\ell h}V_{{\rm in},\ell h},\ w_{\ell h},\
        P_1 c_\ell\big),

    the piecewise-constant process of :class:`~wflow.model.processes.layers.Layers` with
    durations 1 (``solver.dt`` must divide 1: every jump on a step); the values, key logit
    weights and drift are a function of the weight state (the layer whose :math:`D` it
    holds, found bit for bit). Layers of another width than the hidden size (ALBERT's layer
    0, on the embeddings) are left out; a shared-layer model is its one layer, frozen.

    Parameters
    ----------
    imported : wflow.model.checkpoint.ImportedModel
        From :func:`~wflow.model.checkpoint.read_imported`.
    dt : float
        The step; ``round(1/dt) * dt = 1`` within 1e-9.
    """

    name = "imported"
    accepts_general = True
    params = (
        Param("imported", "", Path(), "the .npz of 'wflow import-weights': layer l on [l, l+1)",
              rule=_imported_rule),
    )
    deterministic = True

    @classmethod
    def from_config(cls, spec, H, d, dt):
        path = spec.get("imported")
        if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
            raise ConfigError("weights.imported: missing: process 'imported' needs the .npz "
                              "file of 'wflow import-weights'")
        if not _GENERAL.get():
            raise ConfigError(f"weights.process = 'imported' ({str(path)!r}) with "
                              "model.interaction = 'symmetric': an imported D_h = A_hᵀB_h is not "
                              "symmetric; set model.interaction = 'general' (docs/model.md §5c)")
        proc = cls(_read(path), dt, H=H, d=d, where=f"weights.imported = {str(path)!r}")
        proc.sources = [str(path)]
        return proc

    def __init__(self, imported, dt, H=None, d=None, where="imported model"):
        dt = float(dt)
        steps = int(round(1.0 / dt)) if np.isfinite(dt) and dt > 0 else 0
        if steps < 1 or abs(steps * dt - 1.0) > 1e-9:
            raise ConfigError(f"solver.dt = {dt!r} with weights.process = 'imported': a layer "
                              "lasts 1; the step must divide 1 (1/dt an integer) so that every "
                              "layer switch falls on a step")
        d_out = int(imported.layers[0].V_out.shape[1])
        kept = [ell for ell, lay in enumerate(imported.layers) if lay.d == d_out]
        if not kept:
            raise ConfigError(f"{where}: no layer acts on the hidden size {d_out}")
        if imported.shared:  # one set of weights for every layer: frozen, no switches
            kept = kept[:1]
        if H is not None and imported.heads != H:
            raise ConfigError(f"{where}: {imported.heads} heads, model.heads = {H}: set "
                              f"model.heads = {imported.heads}")
        if d is not None and d_out != d:
            raise ConfigError(f"{where}: hidden size {d_out}, model.d = {d}: set "
                              f"model.d = {d_out}")
        P1 = np.eye(d_out) - 1.0 / d_out
        self.imported, self.kept = imported, kept
        self.factored, self.values_factored, self.values_dense = [], [], []
        self.key_biases, self.drifts, dense = [], [], []
        for ell in kept:
            lay = imported.layers[ell]
            self.factored.append(Factored(lay.A, lay.B, 1.0))
            vf = Factored.values(np.matmul(P1, lay.V_out), lay.V_in)  # P₁ V_out V_in
            self.values_factored.append(vf)
            self.values_dense.append(vf.dense())
            self.key_biases.append(np.asarray(lay.key_bias, dtype=float))
            self.drifts.append(P1 @ np.asarray(lay.drift, dtype=float))
            dense.append(self.factored[-1].dense())
        for i in range(len(dense)):  # the values are a function of D: no two layers differ there
            for j in range(i):
                if np.array_equal(dense[i], dense[j]) and not (
                        np.array_equal(self.values_dense[i], self.values_dense[j])
                        and np.array_equal(self.key_biases[i], self.key_biases[j])
                        and np.array_equal(self.drifts[i], self.drifts[j])):
                    raise ConfigError(f"{where}: layers {kept[j]} and {kept[i]} have the same D_h "
                                      "and different values, key weights or drift: the layer "
                                      "is found from D, so this model cannot be a run")
        self.has_key_bias = [bool(np.any(b != 0)) for b in self.key_biases]
        super().__init__(dense, [1.0] * len(dense), dt)  # round(1/dt) = steps per layer
        self._last = 0

    def jump_times(self):
        """The layer switches, at the integer times 1, ..., L − 1 (exactly)."""
        return [float(ell) for ell in range(1, len(self.sets))]

    def layer_of(self, D):
        """The index (into the kept layers) of the layer whose :math:`D_h` stack ``D``
        (H, d, d) holds, bit for bit; ``ValueError`` if none."""
        order = [self._last] + [i for i in range(len(self.sets)) if i != self._last]
        for i in order:
            if np.array_equal(D, self.sets[i]):
                self._last = i
                return i
        raise ValueError("the weight state holds no layer of the imported model (its D_h "
                         "were changed: the values, key weights and drift follow the layer)")

    def describe(self):
        return {**super().describe(), "process": self.name, "arch": self.imported.arch,
                "layers_used": [int(x) for x in self.kept], "causal": bool(self.imported.causal),
                "source": self.imported.source}

    def attach_model(self, model, cfg, X0):
        """The run's attention model with this process's values, key weights and drift
        (:class:`ImportedFlowModel`), after checking that the configuration states the
        imported model (docs/model.md §5c); ``ConfigError``, one line, otherwise."""
        m, s = cfg["model"], cfg["solver"]
        imp = self.imported
        want = {"model.head_combine": (m["head_combine"], "sum"),
                "model.sign": (m["sign"], "ascent"),
                "model.normalization": (m["normalization"], "head"),
                "model.mask": (m["mask"], "causal" if imp.causal else "none"),
                "model.values": (m["values"], "tied")}
        if s["representation"] == "density":
            raise ConfigError("weights.process = 'imported' with solver.representation = "
                              "'density': a density carries no per-head key weights; the "
                              "imported model runs on particles")
        for key, (got, need) in want.items():
            if got != need:
                why = (f"the {imp.arch} model {'has' if imp.causal else 'has no'} causal mask"
                       if key == "model.mask" else "the imported model states it"
                       if key != "model.values" else "the values come from the file")
                raise ConfigError(f"{key} = {got!r} with weights.process = 'imported': "
                                  f"allowed is {need!r} ({why}; docs/model.md §5c)")
        if tuple(m["laplacian_heads"] or ()):
            raise ConfigError("model.laplacian_heads with weights.process = 'imported': an "
                              "imported model has attention heads only")
        X0 = np.asarray(X0, dtype=float)
        off = float(np.max(np.abs(X0.sum(axis=-1)))) if X0.size else 0.0
        if off > PERP_TOL:
            raise ConfigError(f"initial tokens with weights.process = 'imported': max |Σ_a x_a| "
                              f"= {off:.3g}: the flow lives on the LayerNorm sphere in 1^⊥; "
                              "write them with wflow.model.checkpoint.tokens_from_hidden")
        kw = {f.name: getattr(model, f.name) for f in fields(model)}
        return ImportedFlowModel(**kw, flow=self)


@dataclass(frozen=True)
class ImportedFlowModel(AttentionModel):
    r"""The attention model of an imported run [model §5c]: :meth:`evaluate` at
    :math:`(X; D)` takes the values :math:`P_1V_h`, the key logit weights :math:`w_h` and the
    drift :math:`P_1c` of the layer whose :math:`D` the state holds (path by path), and adds
    the drift once,

    .. math::

        v_i = \sum_h P_{x_i} P_1 V_h\sum_j\pi^h_{ij}x_j + P_{x_i}P_1 c,\qquad
        \pi^h_{ij} \propto e^{\beta x_i^\top D_h x_j + w_h^\top x_j};

    :math:`G^2`, :math:`G^2_{hm}` (§4) are those of this v.

    Parameters
    ----------
    flow : ImportedLayers
        The weight process (the lookup from D to the layer).
    """

    flow: object = dc_field(default=None, compare=False)

    def evaluate(self, X, D, want_ito=True, weights=None, values=None) -> Field:
        if weights is not None or values is not None:
            raise ValueError("an imported model carries its own values and key weights: "
                             "weights= and values= are not taken")
        X = np.ascontiguousarray(X, dtype=float)
        D = np.asarray(D, dtype=float)
        P = X.shape[0]
        flow = self.flow
        lays = [flow.layer_of(D[p]) for p in range(P)]
        if self.backend == "numba":  # the fused pass, with the key terms when any is non-zero
            V = np.stack([flow.values_dense[i] for i in lays])
            kb = None
            if any(flow.has_key_bias[i] for i in lays):
                kb = np.stack([flow.key_biases[i] @ X[p].T for p, i in enumerate(lays)])
            F = AttentionModel.evaluate(self, X, D, want_ito=want_ito, values=V, key_bias=kb)
        else:
            res = [field_reference(X[p], flow.factored[i], self.beta, self.normalization,
                                   self.laplacian_heads, self.causal, flow.values_factored[i],
                                   interaction="general", head_combine=self.head_combine,
                                   key_bias=flow.key_biases[i] @ X[p].T)
                   for p, i in enumerate(lays)]
            names = Field.__dataclass_fields__.keys()
            F = Field(**{k: np.stack([np.asarray(r[k], dtype=float) for r in res])
                         for k in names})
        C = np.stack([flow.drifts[i] for i in lays])  # (P, d), in 1^⊥
        F.velocity = F.velocity + (C[:, None, :]
                                   - np.einsum("pia,pa->pi", X, C)[..., None] * X)
        if not self.causal:  # §4 of this v (NaN under the mask)
            v2 = np.einsum("pia,pia->pi", F.velocity, F.velocity)
            F.G2 = np.mean(v2 / np.mean(1.0 / F.partition, axis=1), axis=-1)
            F.G2_hm = np.mean(v2 * np.mean(F.partition, axis=1), axis=-1)
        return F

    def evaluate_pair(self, X, Da, Db, want_ito=(False, True)):
        return (self.evaluate(X, Da, want_ito=want_ito[0]),
                self.evaluate(X, Db, want_ito=want_ito[1]))


# ---------------------------------------------------------------------- starting tokens
#: init.imported_tokens: the starts of an imported run on the sphere of 1^⊥ [model §5c]
IMPORTED_STARTS = ("ids", "random_ids", "uniform")


def _token_ids(key, v, cfg=None):
    if not isinstance(v, (list, tuple)) or not all(is_int(i) and int(i) >= 0 for i in v):
        raise bad(key, v, f"must be a list of token ids (integers >= 0), got {typename(v)}")
    return [int(i) for i in v]


def _imported_tokens_rule(cfg):
    ini, w = cfg["init"], cfg["weights"]
    if ini["tokens"] != "imported":
        return
    if w["process"] != "imported":
        raise bad("init.tokens", "imported", "needs weights.process = 'imported' (the tokens "
                  "come from the weights.imported file)")
    if ini["imported_tokens"] != "ids":
        return
    ids, f = ini["token_ids"], ini["token_ids_file"].strip()
    if bool(ids) == bool(f):
        raise bad("init.token_ids", ids, "give the token ids either here or in "
                  "init.token_ids_file (exactly one) with init.imported_tokens = 'ids'")
    if ids and len(ids) != cfg["model"]["n"]:
        raise bad("init.token_ids", ids, f"holds {len(ids)} ids, model.n = "
                  f"{cfg['model']['n']}: set model.n = {len(ids)}")


declare(
    Param("init.imported_tokens", "uniform", Choice(IMPORTED_STARTS),
          "init.tokens = 'imported': ids, the model's input embeddings of init.token_ids; "
          "random_ids, of uniformly drawn ids; uniform, on the sphere of 1^⊥ (Gaussian "
          "hidden states through the LayerNorm map) [model §5c]",
          applies=When("init.tokens", "imported"), rule=_imported_tokens_rule),
    Param("init.token_ids", [], Custom(_token_ids, "a list of integer token ids"),
          "the token ids of init.imported_tokens = 'ids' (model.n of them)",
          applies=(When("init.tokens", "imported"), When("init.imported_tokens", "ids"))),
    Param("init.token_ids_file", "", Path(),
          "a text file of token ids (whitespace or commas) for init.imported_tokens = 'ids'",
          applies=(When("init.tokens", "imported"), When("init.imported_tokens", "ids"))),
    after="init.tokens")


def _ids_from_file(path, n):
    where = f"init.token_ids_file = {str(path)!r}"
    try:
        text = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read it ({type(exc).__name__})") from None
    words = text.replace(",", " ").split()
    if not all(w.isdigit() for w in words) or not words:
        bad_word = next((w for w in words if not w.isdigit()), "")
        raise ConfigError(f"{where}: expected token ids (integers >= 0 separated by "
                          f"whitespace or commas){f', got {bad_word!r}' if bad_word else ''}")
    if len(words) != n:
        raise ConfigError(f"{where}: holds {len(words)} ids, model.n = {n}: set "
                          f"model.n = {len(words)}")
    return [int(w) for w in words]


def initial_tokens(cfg, n, d, rng) -> np.ndarray:
    r"""The starting tokens of ``init.tokens = "imported"`` [model §5c], unit rows of
    :math:`\mathbf 1^\perp`: ``y_i = P_1x_i/\|P_1x_i\|`` with :math:`x_i` the model's input
    embedding (token row plus position row) of ``init.token_ids`` (``ids``) or of ids drawn
    uniformly from the vocabulary (``random_ids``), or :math:`x_i \sim N(0, I_d)`
    (``uniform``: uniform on the unit sphere of :math:`\mathbf 1^\perp`). Draws from ``rng``
    (the run's token stream)."""
    from wflow.model.checkpoint import embedding_tokens, tokens_from_hidden

    ini = cfg["init"]
    kind = ini["imported_tokens"]
    if kind == "uniform":
        return tokens_from_hidden(rng.standard_normal((n, d)))
    imp = _read(cfg["weights"]["imported"])
    if kind == "random_ids":
        if imp.embeddings is None:
            return embedding_tokens(imp, [0])  # the one-line refusal
        ids = rng.integers(0, imp.embeddings["tokens"].shape[0], size=n)
    else:
        ids = ini["token_ids"] or _ids_from_file(ini["token_ids_file"], n)
    X = embedding_tokens(imp, ids)
    if X.shape != (n, d):
        raise ConfigError(f"init.tokens = 'imported': tokens of width {X.shape[1]}, model.d = "
                          f"{d}: set model.d = {X.shape[1]}")
    return X
