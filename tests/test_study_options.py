"""What a study does with ``--set`` on a key it sets itself, and the quick label on every
output of a quick study (summary.txt, summary.csv, figures)."""

import csv

import pytest
from PIL import Image

from wflow.cli import main
from wflow.errors import ConfigError
from wflow.studies import (
    STUDIES,
    Study,
    StudyOptions,
    get_study,
    register_study,
    run_study,
    summary_table,
)
from wflow.studies._running import QUICK_MARK
from wflow.sweeps.sweep import expand_grid

FAST = ("model.n=6", "solver.T=0.02", "solver.backend=numpy")


class FamilyStudy(Study):
    """Two families: ``ou`` sweeps the head count and the step (Δt and Δt/2 of the base),
    ``frozen`` fixes its own path count (one path), as section6's oscillating family does."""

    name = "family-test-study"
    question = "what does a study do with --set on the keys it sets itself?"
    quick = "T = 0.02 (a test)"

    def base(self, scale):
        return {"model": {"n": 6, "heads": 1, "beta": 1.0},
                "solver": {"T": 0.02 if scale == "quick" else 0.04, "dt": 0.01,
                           "record_every": 1, "paths": 2, "backend": "numpy"},
                "diagnostics": {"clustering": False}, "output": {"store_tokens": False}}

    def variants(self, base, scale):
        half = {**base, "solver": {**base["solver"], "dt": base["solver"]["dt"] / 2}}
        frozen = {**base, "weights": {"process": "frozen"},
                  "solver": {**base["solver"], "paths": 1}}
        return (expand_grid(base, {"model.heads": [1, 2]}, name="ou")
                + expand_grid(half, {"model.heads": [1]}, name="half")
                + expand_grid(frozen, {"model.beta": [0.5, 1.0]}, name="frozen"))

    def summarize(self, data):
        return summary_table(data.paths, ("energy",))

    def figures(self, data, outdir, formats):
        from wflow.studies._tables import _run_figures

        return _run_figures(data.paths[:1], outdir, formats, ["G2"])


@pytest.fixture
def family():
    register_study(FamilyStudy)
    yield get_study(FamilyStudy.name)
    STUDIES.pop(FamilyStudy.name)


def test_section6_refuses_a_head_count_in_one_line(tmp_path, capsys):
    """The reproducer: ``wflow study section6 --quick --set model.heads=3`` ran H = 1, 10, 100
    with exit 0. It is refused before any run, in one line naming the study and the key."""
    out = tmp_path / "s6"
    assert main(["study", "section6", "--quick", "-q", "--no-plots", "-o", str(out),
                 "--set", "model.heads=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "study section6" in err[0] and "model.heads" in err[0] and "1, 10, 100" in err[0]
    assert not out.exists() or not list(out.glob("*.h5"))
    with pytest.raises(ConfigError, match="study section6 sweeps model.heads"):
        run_study("section6", tmp_path / "api", scale="quick", overrides=["model.heads=10"])


def test_section6_paths_apply_to_the_ou_family_and_the_summary_says_where_not():
    """``--set solver.paths=3``: the OU runs take it, the one-path oscillating family keeps
    its path; the note names those runs."""
    opts = StudyOptions(scale="quick", overrides=("solver.paths=3",))
    st = get_study("section6")
    tasks = dict(st.tasks(opts))
    assert {tasks[f"ou-heads={h}"]["solver"]["paths"] for h in (1, 10, 100)} == {3}
    assert {tasks[f"oscillating-heads={h}"]["solver"]["paths"] for h in (1, 10, 100)} == {1}
    (note,) = st.overridden(opts, list(tasks.items()))
    assert note.startswith("--set solver.paths=3 applies to 3 of 6 runs; study section6 sets "
                           "solver.paths = 1 itself in oscillating-heads=1"), note


def test_what_counts_as_applied(family):
    """A value derived from the override (Δt/2 of the given Δt) is applied; a grid value
    equal to the override by coincidence is not (β = 0.5 of the frozen family's grid), so β
    is refused; a key one family fixes is applied to the others, with a note."""
    st = family
    opts = StudyOptions(scale="quick", overrides=("solver.dt=0.02",))
    tasks = dict(st.tasks(opts))
    assert tasks["half-heads=1"]["solver"]["dt"] == 0.01 and st.overridden(opts) == []
    for over in ("model.beta=0.5", "model.beta=2.0", "model.heads=2"):
        with pytest.raises(ConfigError, match=rf"^--set {over}: study {st.name} sweeps "
                                              rf"{over.split('=')[0]} itself [^\n]*$"):
            st.tasks(StudyOptions(overrides=(over,)))
    # a study that makes its tasks itself (phase replaces its β axis by a given β) is
    # compared with its own tasks made without the override
    phase = get_study("phase")
    for over in (("model.beta=2.0",), ("solver.adaptive=true", "model.beta=2.0")):
        opts = StudyOptions(overrides=over)
        assert {c["model"]["beta"] for _, c in phase.tasks(opts)} == {2.0}
        assert phase.overridden(opts) == []
    notes = st.overridden(StudyOptions(overrides=("solver.paths=4",)))
    assert notes == ["--set solver.paths=4 applies to 3 of 5 runs; study family-test-study sets "
                     "solver.paths = 1 itself in frozen-beta=0.5, frozen-beta=1"]


def test_every_output_of_a_quick_study_says_it_is_one(family, tmp_path):
    """summary.txt opens with the QUICK line (what the scale reduces) and the notes of the
    overrides; summary.csv has the scale in every row; every figure carries the mark, drawn
    and in its metadata. A full run has none of them (and scale "full")."""
    st = family
    quick = run_study(st, tmp_path / "q", scale="quick", formats=("png", "pdf"),
                      overrides=["solver.paths=3"])
    lines = (tmp_path / "q" / "summary.txt").read_text().splitlines()
    assert lines[0] == (f"QUICK: wflow study {st.name} --quick is a pipeline check, not the "
                        f"published setting: no number below is a result. Quick scale: "
                        f"{st.quick}.")
    assert lines[1].startswith("note: --set solver.paths=3 applies to 3 of 5 runs") and not lines[2]
    rows = list(csv.DictReader(open(tmp_path / "q" / "summary.csv")))
    assert rows and {r["scale"] for r in rows} == {"quick"}
    figs = [p for p in quick.files if p.suffix in (".png", ".pdf")]
    assert {p.suffix for p in figs} == {".png", ".pdf"}
    for p in figs:
        if p.suffix == ".png":
            assert Image.open(p).info.get("Description") == QUICK_MARK, p
        else:
            pdf = p.read_bytes()  # the info dictionary (uncompressed), parentheses escaped
            assert b"/Subject (quick: pipeline check \\(short T" in pdf, p
    full = run_study(st, tmp_path / "f", scale="full", formats=("png",))
    assert not full.text.startswith(("QUICK", "note")) and "QUICK" not in full.text
    assert {r["scale"] for r in csv.DictReader(open(tmp_path / "f" / "summary.csv"))} == {"full"}
    assert all("Description" not in Image.open(p).info for p in full.files
               if p.suffix == ".png")


def test_quick_section6_fit_says_it_is_a_transient(tmp_path):
    """The quick oscillating fit printed ``b = -0.151 [-0.258, -0.044]`` unlabelled: every fit
    line of a quick section6 names the T it comes from."""
    r = run_study("section6", tmp_path, scale="quick", formats=(),
                  overrides=["model.n=8", "solver.T=0.05", "solver.backend=numpy"])
    assert r.text.startswith("QUICK: wflow study section6 --quick is a pipeline check")
    assert r.text.splitlines()[0].endswith("Quick scale: T = 0.5, 2 OU paths (the pipeline, "
                                           "not the exponents).")
    fits = [ln for ln in r.text.splitlines() if ln.startswith("fit G2")]
    assert len(fits) == 2 and all("quick: a T = 0.05 transient, not the exponent" in ln
                                  for ln in fits), fits
