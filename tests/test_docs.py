"""The runnable blocks of the README and the docs: a copied snippet works.

A fenced code block preceded by the line ``<!-- runnable -->`` (an HTML comment: invisible on
a rendered page) is executed by :func:`test_runnable_blocks_run` (marked ``slow``), file by
file, in a fresh temporary folder, blocks in page order (a block may use the files and names
of the ones before it):

- ``python`` blocks are executed in one namespace per file;
- ``bash`` blocks are read line by line (a ``\\`` continues a line, ``#`` starts a comment);
  a line is split at ``&&`` and each ``wflow …`` command runs as ``python -m wflow.cli …``
  and must exit 0. Commands of other programs are skipped only if listed in
  :data:`SKIPPED` (installing, creating the venv, the test suite itself); any other is an
  error, so a new kind of command is noticed. Long runs get the quick sizes of
  :data:`QUICK`, appended to the command (``wflow study NAME`` → ``--quick``; a run of a
  shipped experiment → ``--set solver.T=0.1``): the command's pipeline is checked, not its
  published size.

:func:`test_runnable_blocks_found` (fast, in the default run) checks that the extraction
finds the expected blocks, so the slow test cannot silently test nothing.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- runnable -->"
#: the files scanned, and how many runnable blocks of each language each holds
EXPECTED = {
    "README.md": {"bash": 2, "python": 1},
    "docs/guide.md": {"bash": 1, "python": 2},
}
#: commands of other programs that a runnable bash block may hold; they are not run
SKIPPED = ("python3 -m venv", ". .venv/bin/activate", "pip install", "python -m pytest")
#: appended to a ``wflow`` command (by its first words) so that it runs at a quick size
QUICK = {
    ("study",): ["--quick"],
    ("experiments", "run"): ["--set", "solver.T=0.1"],
}
_FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)")


def runnable_blocks(path) -> list[tuple[str, str, int]]:
    """``[(language, code, line)]`` of the runnable blocks of a Markdown file (line: 1-based,
    of the block's first code line)."""
    lines = Path(path).read_text("utf-8").splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        m = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if m is None:
            raise ValueError(f"{path}:{i + 1}: {MARKER} is not followed by a fenced code block")
        fence, lang = m.group(1), m.group(2) or "text"
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith(fence))
        blocks.append((lang, "\n".join(lines[i + 2:end]) + "\n", i + 3))
    return blocks


def shell_commands(code) -> list[list[str]]:
    """The commands of a bash block: comments dropped, ``\\`` lines joined, split at ``&&``."""
    text = re.sub(r"\\\n", " ", code)
    commands = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        cmd = []
        for w in words + ["&&"]:
            if w == "&&":
                if cmd:
                    commands.append(cmd)
                cmd = []
            else:
                cmd.append(w)
    return commands


def quick(cmd) -> list[str]:
    """A ``wflow`` command with its quick-size options (:data:`QUICK`) appended."""
    args = cmd[1:]
    for prefix, extra in QUICK.items():
        if tuple(args[:len(prefix)]) == prefix and extra[0] not in args:
            return cmd + extra
    return cmd


def test_runnable_blocks_found():
    for name, expected in EXPECTED.items():
        langs = [lang for lang, _, _ in runnable_blocks(ROOT / name)]
        assert {lang: langs.count(lang) for lang in set(langs)} == expected, name
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        name = path.relative_to(ROOT).as_posix()
        if name not in EXPECTED:
            assert not runnable_blocks(path), f"{name}: runnable blocks, add it to EXPECTED"


def test_shell_commands_and_quick_sizes():
    code = ("pip install -e . && wflow run   # install, run\n"
            "wflow sweep --grid 'model.heads=[1, 10]' \\\n      -o out\n"
            "wflow study energy\n")
    assert shell_commands(code) == [["pip", "install", "-e", "."], ["wflow", "run"],
                                    ["wflow", "sweep", "--grid", "model.heads=[1, 10]", "-o", "out"],
                                    ["wflow", "study", "energy"]]
    assert quick(["wflow", "study", "energy"]) == ["wflow", "study", "energy", "--quick"]
    assert quick(["wflow", "study", "energy", "--quick"]) == ["wflow", "study", "energy", "--quick"]
    assert quick(["wflow", "run"]) == ["wflow", "run"]


def _run_shell(code, where, cwd, env):
    for cmd in shell_commands(code):
        line = " ".join(cmd)
        if cmd[0] != "wflow":
            assert line.startswith(SKIPPED), f"{where}: `{line}` is neither wflow nor skipped"
            continue
        proc = subprocess.run([sys.executable, "-m", "wflow.cli", *quick(cmd)[1:]], cwd=cwd,
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (f"{where}: `{line}` exited {proc.returncode}\n"
                                      f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_runnable_blocks_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    namespace = {"__name__": "__main__"}
    for lang, code, line in runnable_blocks(ROOT / name):
        where = f"{name}:{line}"
        if lang == "python":
            exec(compile(code, where, "exec"), namespace)
        elif lang in ("bash", "sh", "console"):
            _run_shell(code, where, tmp_path, env)
        else:
            raise AssertionError(f"{where}: a runnable block of language {lang!r}")
