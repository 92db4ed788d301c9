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
