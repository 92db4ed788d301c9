"""The core install is permissive: no dependency of ``pip install wflow`` (without extras),
direct or transitive, declares a GPL licence, and none of the packages known to bundle GPL code
under a permissive declaration (finufft's wheels link FFTW statically) is among them.

The licences are read from the installed distributions' metadata (``importlib.metadata``):
``License-Expression``, the ``License`` field and the ``License ::`` classifiers.
"""

from __future__ import annotations

import importlib.metadata as md
import re

import pytest

#: packages whose wheels carry GPL code that their metadata does not declare
BUNDLES_GPL = {"finufft"}

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_GPL = re.compile(r"(?<![L])GPL|GNU General Public", re.IGNORECASE)


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _core_requirements(requires) -> list[str]:
    """Names of the requirements that a plain install pulls in (no ``extra == ...`` marker)."""
    names = []
    for r in requires or []:
        marker = r.split(";", 1)[1] if ";" in r else ""
        if "extra" in marker:
            continue
        names.append(_NAME.match(r).group(1))
    return names


def _licences(dist) -> list[str]:
    m = dist.metadata
    first_line = (m.get("License") or "").partition("\n")[0]  # often the whole licence text
    out = [m.get("License-Expression") or "", first_line]
    out += [c for c in m.get_all("Classifier") or [] if c.startswith("License ::")]
    return [s for s in out if s]


def core_closure(root: str = "wflow") -> dict[str, list[str]]:
    """Every distribution a plain install of ``root`` needs (installed ones), with its licences."""
    seen: dict[str, list[str]] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        key = _key(name)
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            seen[key] = []
            continue
        seen[key] = _licences(dist)
        todo += _core_requirements(dist.requires)
    return seen


def gpl_offenders(closure: dict[str, list[str]]) -> list[str]:
    """The distributions of ``closure`` that declare a GPL licence or are known to bundle one."""
    return sorted(k for k, lic in closure.items()
                  if k in BUNDLES_GPL or any(_GPL.search(s) for s in lic))


def test_core_install_has_no_gpl_dependency():
    closure = core_closure()
    assert "numpy" in closure and "numba" in closure  # the walk reaches the core dependencies
    assert gpl_offenders(closure) == [], closure


@pytest.mark.parametrize("lic, bad", [("GPL-2.0-or-later", True), ("GNU General Public License v3", True),
                                      ("LGPL-2.1", False), ("BSD-3-Clause", False),
                                      ("License :: OSI Approved :: GNU General Public License (GPL)", True)])
def test_the_check_sees_a_gpl_licence(lic, bad):
    assert (gpl_offenders({"pkg": [lic]}) == ["pkg"]) is bad
    assert gpl_offenders({"finufft": ["Apache-2.0"]}) == ["finufft"]


def test_extras_are_not_core():
    reqs = ['numpy>=1.24', 'finufft>=2.3; extra == "spectral"', 'torch==2.13.0 ; extra == "hf"',
            'tomli; python_version < "3.11"']
    assert _core_requirements(reqs) == ["numpy", "tomli"]
