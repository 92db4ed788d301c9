"""The repository's text files are clean: no control characters (a docstring written through
an escaping layer turns ``\\beta`` into a backspace and ``\\rangle`` into a line break), no
absolute path of a developer's machine."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = {".py", ".md", ".toml", ".rst", ".txt", ".cfg", ".yml", ".yaml", ".sh", ".csv", ".json"}
#: bytes that never belong in a text file (tab, LF and CR excepted)
CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: home and scratch folders of a developer's machine
MACHINE_PATH = re.compile(rb"(?<![\w.])/(?:home|Users|root|work)/[\w.-]+")


def _tracked() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = [ROOT / p for p in out.stdout.decode().split("\0") if p]
    return [p for p in files if p.suffix in TEXT or p.parent.name == ".ci"]


def offenders(files, pattern) -> list[str]:
    bad = []
    for p in files:
        if not p.is_file():
            continue
        for i, line in enumerate(p.read_bytes().split(b"\n"), 1):
            if pattern.search(line):
                bad.append(f"{os.path.relpath(p, ROOT)}:{i}")
    return bad


def test_no_control_characters():
    assert offenders(_tracked(), CONTROL) == []


def test_no_machine_paths():
    assert offenders(_tracked(), MACHINE_PATH) == []


def test_the_checks_see_what_they_look_for(tmp_path):
    f = tmp_path / "probe.txt"
    f.write_bytes(b'ok\n    s = \x08eta x\nsee /' + b'home/alice/data.npz\n')
    name = os.path.relpath(f, ROOT)
    assert offenders([f], CONTROL) == [f"{name}:2"]
    assert offenders([f], MACHINE_PATH) == [f"{name}:3"]
