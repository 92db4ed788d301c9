"""The documentation site: its offline check (``docs/_ext/offline_check.py``) and a number that
``docs/model.md`` quotes."""

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def offline_check():
    path = ROOT / "docs" / "_ext" / "offline_check.py"
    spec = importlib.util.spec_from_file_location("offline_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAGE = """<html><head>
<link rel="stylesheet" href="_static/theme.css">
<link rel="canonical" href="https://example.org/page.html">
{head}
</head><body><p>text <a href="https://example.org/">a link is followed, not loaded</a></p>{body}</body></html>
"""


@pytest.mark.parametrize("head, body, expected", [
    ('<script defer src="https://cdn.jsdelivr.net/npm/mathjax@4/tex-mml-chtml.js"></script>', "",
     [("script", "https://cdn.jsdelivr.net/npm/mathjax@4/tex-mml-chtml.js")]),
    ('<link href="//fonts.example.org/a.css" rel="stylesheet">', "", [("link", "//fonts.example.org/a.css")]),
    ("", '<img src="http://example.org/x.png">', [("img", "http://example.org/x.png")]),
    ("", '<iframe src="https://example.org/embed"></iframe>', [("iframe", "https://example.org/embed")]),
    ("<style>@import url('https://example.org/f.css');</style>", "", [("style", "https://example.org/f.css")]),
    ('<script defer src="_static/mathjax/tex-chtml.js"></script>', '<img src="_images/a.png">', []),
])
def test_offline_check_finds_what_a_page_loads_from_the_network(tmp_path, offline_check, head, body,
                                                                 expected):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "page.html").write_text(PAGE.format(head=head, body=body))
    found = offline_check.remote_loads(tmp_path)
    assert found == ({"sub/page.html": expected} if expected else {})


def test_offline_check_reads_stylesheets(tmp_path, offline_check):
    (tmp_path / "local.css").write_text("body { background: url('img/bg.png'); }")
    (tmp_path / "remote.css").write_text('@font-face { src: url("https://fonts.example.org/x.woff2"); }')
    assert offline_check.remote_loads(tmp_path) == {"remote.css": [("css", "https://fonts.example.org/x.woff2")]}


def test_model_6b_quotes_the_exact_law_of_the_scheme():
    """[model §6b]: lambda = E (1 + 2 nu dt q)^(-1/2), q ~ chi2_(d-1); the page quotes lambda^10 for
    d = 5, nu = 0.5, dt = 0.05 to four digits."""
    d, nu, dt = 5, 0.5, 0.05
    lam = integrate.quad(lambda q: (1 + 2 * nu * dt * q) ** -0.5 * stats.chi2.pdf(q, d - 1), 0, np.inf,
                         epsabs=1e-13, epsrel=1e-12)[0]
    text = (ROOT / "docs" / "model.md").read_text(encoding="utf-8")
    section = text[text.index("## §6b"):text.index("## §6c")]
    quoted = float(re.search(r"\\lambda\^\{10\} = ([0-9.]+)", section).group(1))
    assert quoted == pytest.approx(lam**10, abs=0.5e-4)
