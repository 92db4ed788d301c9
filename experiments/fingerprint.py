"""Fingerprints of a fixed set of runs, to show that a refactoring leaves results unchanged.

    python experiments/fingerprint.py OUT.json            # record
    python experiments/fingerprint.py OUT.json --compare BEFORE.json

Runs the embedded default, one run of each weight process and of each solver, and the
companion case of tests/data; writes the SHA-256 of every array's bytes. Bit-identity holds
on one machine only (the last bits depend on the vector width), so this is a script to run
before and after a change on the same machine, not a test.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

import wflow

HERE = Path(__file__).resolve().parent
SMALL = {"model": {"n": 24, "heads": 3}, "solver": {"T": 0.2, "dt": 0.01, "record_every": 5,
                                                    "paths": 2},
         "diagnostics": {"ledger": True, "w2": True}, "output": {"store_weights": True}}


def _cfg(**over):
    import copy

    cfg = copy.deepcopy(SMALL)
    for key, val in over.items():
        sec, k = key.split("__")
        cfg.setdefault(sec, {})[k] = val
    return cfg


def cases(tmp: Path):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 3, 3, 3))
    np.savez(tmp / "w.npz", D=A + A.transpose(0, 1, 3, 2), t=np.arange(6) * 0.05)
    yield "default", None
    yield "frozen", _cfg(weights__process="frozen")
    yield "ou-em", _cfg(weights__process="ou")
    yield "ou-exact", _cfg(weights__process="ou", weights__scheme="exact")
    yield "osc-shared", _cfg(weights__process="oscillating", weights__noise_var=0.0)
    yield "osc-spread-exact", _cfg(weights__process="oscillating", weights__phase="spread",
                                   weights__scheme="exact", weights__noise_var=0.0)
    yield "layers", _cfg(weights__process="layers", weights__layers=[
        {"duration": 0.1, "weights": "identity"},
        {"duration": 0.1, "weights": "symmetric_gaussian", "seed": 3}])
    yield "file", _cfg(weights__process="file", weights__file=str(tmp / "w.npz"))
    for method in ("euler", "heun", "rk4"):
        yield f"solver-{method}", _cfg(solver__method=method)
    yield "solver-jko", _cfg(solver__method="jko", solver__T=0.05, model__n=10)
    yield "joint-laplacian-ascent", _cfg(model__normalization="joint", model__laplacian_heads=1,
                                         model__sign="ascent", model__values="gaussian")
    # the features that branch in the run: adaptive steps (events, geometric records), the
    # layer-norm placements, token noise, general interactions, the causal mask, per-layer
    # values, the density on S^1 and S^2 (with diffusion: the free energy)
    yield "adaptive-dopri5", _cfg(weights__process="frozen", solver__adaptive=True,
                                  solver__method="dopri5", diagnostics__ledger=False)
    yield "adaptive-bs32-event", _cfg(weights__process="oscillating", weights__noise_var=0.0,
                                      solver__adaptive=True, solver__method="bs32",
                                      solver__event="order_parameter", solver__T=0.5,
                                      solver__event_threshold=0.3, diagnostics__ledger=False,
                                      model__beta=4.0)
    yield "geometric-records", _cfg(solver__record_times="geometric", solver__records=6)
    for place in ("pre", "peri", "ngpt", "mix"):
        extra = {"model__mix_switch": 0.1} if place == "mix" else {}
        yield f"layernorm-{place}", _cfg(model__layernorm=place, model__sign="ascent",
                                         solver__method="heun", diagnostics__ledger=False,
                                         **extra)
    yield "token-noise", _cfg(model__diffusion=0.1)
    yield "general", _cfg(model__interaction="general", init__weights="gaussian",
                          weights__process="ou", diagnostics__ledger=False)
    yield "causal", _cfg(model__mask="causal", diagnostics__ledger=False)
    yield "layers-values", _cfg(weights__process="layers", weights__layers=[
        {"duration": 0.1, "weights": "identity", "values": "gaussian", "seed": 1},
        {"duration": 0.1, "weights": "symmetric_gaussian", "seed": 3}])
    yield "density-s1", _cfg(model__d=2, solver__representation="density",
                             solver__method="ssprk3", init__tokens="uniform_mode",
                             density__cells=64, model__beta=3.0)
    yield "density-s2", _cfg(model__d=3, solver__representation="density",
                             solver__method="ssprk3", init__tokens="vmf",
                             density__cells=200, model__diffusion=0.05)


def fingerprint() -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in cases(Path(tmp)):
            res = wflow.simulate(cfg)
            out[name] = {k: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()[:16]
                         for k, v in sorted(res.arrays.items())}
    z = np.load(HERE.parent / "tests" / "data" / "companion_case.npz")
    F = wflow.field(z["X"], z["D"])
    out["companion"] = {k: hashlib.sha256(np.ascontiguousarray(getattr(F, k)).tobytes())
                        .hexdigest()[:16] for k in ("velocity", "energy", "G2", "dE_dD")}
    return out


def main(argv):
    out = Path(argv[0])
    fp = fingerprint()
    out.write_text(json.dumps(fp, indent=1, sort_keys=True))
    if "--compare" in argv:
        before = json.loads(Path(argv[argv.index("--compare") + 1]).read_text())
        diff = [(c, k) for c in before for k in before[c] if fp.get(c, {}).get(k) != before[c][k]]
        extra = [(c, k) for c in fp for k in fp[c] if k not in before.get(c, {})]
        n = sum(len(v) for v in before.values())
        print(f"{n - len(diff)} of {n} arrays bit-identical in {len(before)} cases")
        for c, k in diff:
            print(f"  differs: {c}/{k}")
        for c, k in extra:
            print(f"  new: {c}/{k}")
        return 1 if diff else 0
    print(f"wrote {out}: {sum(len(v) for v in fp.values())} arrays in {len(fp)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
