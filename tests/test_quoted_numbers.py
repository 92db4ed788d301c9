"""One quantity, one number: a number the README or the docs quote from a study's saved result
equals that result, and names its interval's method.

The saved results of the full studies are the tables of their pages (``experiments/*.md``;
``docs/studies.md`` for ``section6`` and ``energy``). A saved number carries the marker
``<!-- saved KEY method="M" -->`` right after it (the method optional); a quote of it carries
``<!-- from PAGE KEY -->`` right after the quoted number. The number is the estimate written
before the marker, with its interval ``[low, high]`` if one follows it (line breaks and
indentation read as one space, ``**`` ignored). A quote equals the saved estimate digit for
digit; a quoted interval equals the saved one, and the quote's paragraph (or table row)
names the saved method.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "experiments").glob("*.md"))]

#: a key is dotted names (``heads.ou.b_G2``), a page a path ending in .md: the placeholders
#: of the prose that describes the markers (``PAGE KEY``) are not markers
_KEY = r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)+"
SAVED = re.compile(rf'<!-- saved (?P<key>{_KEY})(?: method="(?P<method>[^"]+)")? -->')
FROM = re.compile(rf"<!-- from (?P<page>[\w/.-]+\.md) (?P<key>{_KEY}) -->")
_NUM = r"[−-]?\d+(?:\.\d+)?(?:·10[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)?"
#: a bound of an interval: a number, or "> T" (a censored bound: not reached by T)
_BOUND = rf"(?:> )?{_NUM}"
#: estimate, then optionally (across a table cell border) its interval, at the end of the text
_VALUE = re.compile(rf"(?P<est>{_NUM})(?:(?:\s*\|\s*|\s*)\[(?P<low>{_BOUND}), "
                    rf"(?P<high>{_BOUND})\])?\**$")


def _norm(x):
    return None if x is None else x.replace("-", "−")


def value_before(text, pos):
    """``(estimate, low, high)`` written just before ``pos`` (low, high None without an
    interval), or None when no number ends there."""
    before = re.sub(r"\s*\n\s*", " ", text[max(0, pos - 160):pos]).rstrip()
    before = re.sub(r"<!--.*?-->", "", before)  # an earlier marker on the way
    m = _VALUE.search(before)
    return None if m is None else tuple(_norm(m[k]) for k in ("est", "low", "high"))


def paragraph(text, pos):
    """The block around ``pos``: its table row, else the lines between blank lines."""
    start, end = text.rfind("\n", 0, pos) + 1, text.find("\n", pos)
    line = text[start:end if end >= 0 else None]
    if line.lstrip().startswith("|"):
        return line
    a = text.rfind("\n\n", 0, pos)
    b = text.find("\n\n", pos)
    return text[a + 2 if a >= 0 else 0:b if b >= 0 else None]


def saved_values(pages=PAGES, root=ROOT):
    """``{(page, key): (value, method)}`` of every saved marker (page relative to ``root``);
    a key saved twice in one page is an error."""
    out = {}
    for page in pages:
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(root).as_posix()
        for m in SAVED.finditer(text):
            key = (rel, m["key"])
            assert key not in out, f"{rel}: {m['key']} saved twice"
            out[key] = (value_before(text, m.start()), m["method"])
    return out


def quotes(pages=PAGES, root=ROOT):
    """``[(page, line, (saved page, key), value, paragraph)]`` of every quote marker."""
    out = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(root).as_posix()
        for m in FROM.finditer(text):
            out.append((rel, text.count("\n", 0, m.start()) + 1, (m["page"], m["key"]),
                        value_before(text, m.start()), paragraph(text, m.start())))
    return out


def mismatches(saved, quoted):
    """One line per quote that does not equal its saved number or does not name its method."""
    bad = []
    for page, line, src, value, para in quoted:
        where = f"{page}:{line} ({src[0]} {src[1]})"
        if src not in saved:
            bad.append(f"{where}: no such saved number")
            continue
        ref, method = saved[src]
        if value is None:
            bad.append(f"{where}: no number before the marker")
        elif value[0] != ref[0] or (value[1] is not None and value[1:] != ref[1:]):
            bad.append(f"{where}: quoted {value}, saved {ref}")
        elif value[1] is not None and method and method not in re.sub(r"\s+", " ", para):
            bad.append(f"{where}: the interval's method ({method}) is not named beside it")
    return bad


def test_every_saved_marker_follows_a_number():
    saved = saved_values()
    assert len(saved) >= 10
    missing = [f"{p} {k}" for (p, k), (v, _) in saved.items() if v is None]
    assert not missing, missing


def test_quoted_numbers_equal_their_saved_results():
    """Each quote in the README, docs/ and experiments/ equals the number it names, interval
    and method included."""
    q = quotes()
    assert len(q) >= 15
    bad = mismatches(saved_values(), q)
    assert not bad, "\n".join(bad)


def test_the_headline_intervals_are_tied_to_their_results():
    """Every interval in the README, and every one of the section6 and heads paragraphs of
    docs/studies.md, is a quote (a marker after it): an interval typed in without its source
    fails here."""
    interval = re.compile(rf"{_NUM} \[{_NUM}, {_NUM}\]\**(?!<!-- (?:from|saved) )")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    loose = [m[0] for m in interval.finditer(readme)]
    studies = (ROOT / "docs" / "studies.md").read_text(encoding="utf-8")
    for start, end in (("**The paper's Section 6", "**The reference value"),
                       ("**Head-count scaling", "**Stability")):
        part = studies[studies.index(start):studies.index(end)]
        loose += [m[0] for m in interval.finditer(re.sub(r"\s*\n\s*", " ", part))]
    assert not loose, loose
    q = {src for page, _, src, _, _ in quotes() if page == "README.md"}
    assert {("docs/studies.md", "section6.ou.b"), ("experiments/heads.md", "heads.ou.b_G2")} <= q


def test_a_changed_quote_is_caught(tmp_path):
    """The check itself: a quote whose digits, interval or method differ from the saved number,
    or that names no saved number, is reported; the same quote written correctly is not."""
    src = tmp_path / "src.md"
    src.write_text('| OU | **−0.968 [−1.008, −0.922]**<!-- saved s.b method="BCa" --> |\n'
                   "| 4 | 0.00410 | [0.00348, 0.00496]<!-- saved s.g --> |\n", encoding="utf-8")
    saved = saved_values([src], root=tmp_path)
    assert saved[("src.md", "s.g")] == (("0.00410", "0.00348", "0.00496"), None)
    texts = {
        "ok": "b = −0.968 [−1.008, −0.922]<!-- from src.md s.b --> (95% BCa)",
        "estimate": "G² falls to 0.00410<!-- from src.md s.g --> at H = 4",
        "digits": "b = −0.97 [−1.008, −0.922]<!-- from src.md s.b --> (95% BCa)",
        "interval": "b = −0.968\n  [−1.022, −0.915]<!-- from src.md s.b --> (95% BCa)",
        "method": "b = −0.968 [−1.008, −0.922]<!-- from src.md s.b --> (95%)",
        "unknown": "b = 1<!-- from src.md s.c -->",
    }
    for name, text in texts.items():
        page = tmp_path / f"{name}.md"
        page.write_text(text + "\n", encoding="utf-8")
        bad = mismatches(saved, quotes([page], root=tmp_path))
        assert len(bad) == (0 if name in ("ok", "estimate") else 1), (name, bad)


@pytest.mark.parametrize("text,value", [
    ("S¹ b = 1.88 [0.98, 2.78]", ("1.88", "0.98", "2.78")),
    ("median **5.29·10⁵ [6140, 4.36·10⁶]**", ("5.29·10⁵", "6140", "4.36·10⁶")),
    ("a = -0.493 | [-0.523, -0.456]", ("−0.493", "−0.523", "−0.456")),
    ("t½ = 415 [198, > 1000]", ("415", "198", "> 1000")),
    ("(G² 0.385", ("0.385", None, None)),
    ("no number here", None),
])
def test_value_before(text, value):
    assert value_before(text + "<!--", len(text)) == value


# ------------------------------------------------------------------ the pasted summaries
_CELL = re.compile(r"(> T|> \d+|[\d.]+)\s+\[(> T|> \d+|[\d.]+), (> T|> \d+|[\d.]+)\]")


def _blocks(text):
    """The fenced code blocks of a page (the pasted ``summary.txt`` of its runs)."""
    return re.findall(r"^```\n(.*?)^```", text, flags=re.S | re.M)


def _phase_summary(text):
    """``{key: (t½, low, high)}`` of the phase page's two summaries: the fixed mode
    (``phase.fixed.d<d>.b<β>``) and the adaptive one (``phase.adaptive...``)."""
    out = {}
    for block in _blocks(text):
        mode = "adaptive" if "dopri5" in block else "fixed"
        d = None
        for line in block.splitlines():
            m = re.match(r"^d = (\d)\s+\(", line)
            if m:
                d = m[1]
                continue
            m = re.match(r"^\s+(\d+(?:\.\d+)?)\s+(.*)$", line)
            cell = _CELL.match(m[2]) if m and d else None
            if cell:  # (the rows of the resolution check hold no interval)
                out.setdefault(f"phase.{mode}.d{d}.b{m[1].replace('.', '_')}", cell.groups())
    return out


def _asymmetry_summary(text):
    """``{key: (estimate, low, high)}`` of the asymmetry page's summary: post-LN's pooled t½
    (``asymmetry.post.b<β>.a<α>``), its per-system Kaplan–Meier median and clusters at
    t = 1000 (``asymmetry.b<β>.km.a<α>``, ``asymmetry.b<β>.clusters.a<α>``) and the
    Kaplan–Meier medians at the common window
    (``asymmetry.window.b<β>.a<α>.<placement>``)."""
    out, section = {}, None
    block = next(b for b in _blocks(text) if "post-LN" in b)
    for line in block.splitlines():
        if re.match(r"^(post|pre|peri|ngpt|mix)-LN\s", line):
            section = line.split("-LN")[0]
            continue
        if line.startswith("Placements at a common window"):
            section = "window"
            continue
        if line.startswith("Resolution"):
            section = None
        m = re.match(r"^\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(.*)$", line)
        if section not in ("post", "window") or not m:
            continue
        cells = _CELL.findall(m[3])
        a = f"b{m[1]}.a{m[2].replace('.', '_')}"
        if section == "post":  # pooled t½; the per-system KM median; the clusters at t = 1000
            out[f"asymmetry.post.{a}"] = cells[0]
            alpha = f"a{m[2].replace('.', '_')}"
            out[f"asymmetry.b{m[1]}.km.{alpha}"] = cells[1]
            out[f"asymmetry.b{m[1]}.clusters.{alpha}"] = cells[6]
        else:
            for place, cell in zip(("post", "pre", "peri", "ngpt", "mix"), cells):
                out[f"asymmetry.window.{a}.{place}"] = cell
    return out


def _rounds_to(shown, full, T):
    """Whether ``shown`` (a table's number, or "> T" written out) is ``full`` (the summary's)
    rounded to the digits shown."""
    if full.startswith(">"):
        return shown in (full, f"> {T}") or shown == full.replace("T", str(T))
    if shown.startswith(">"):
        return False
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return abs(float(shown) - float(full)) <= 0.5 * 10.0**-decimals + 1e-9


@pytest.mark.parametrize("page,parse", [("experiments/phase.md", _phase_summary),
                                        ("experiments/asymmetry.md", _asymmetry_summary)])
def test_the_saved_half_merge_times_are_their_pasted_summaries(page, parse):
    """The phase and asymmetry pages save their half-merge times in tables (which
    docs/studies.md quotes); each saved number and interval is the pasted ``summary.txt`` of
    the run above it, rounded to the digits shown ("> 1000": the summary's "> T")."""
    text = (ROOT / page).read_text(encoding="utf-8")
    full = parse(text)
    saved = {k: v for (p, k), v in saved_values([ROOT / page]).items() if p == page}
    assert len(saved) >= 20 and set(saved) <= set(full), sorted(set(saved) - set(full))
    bad = []
    for key, ((est, low, high), _) in saved.items():
        T = 200 if ".window." in key else 1000
        shown = (est, low, high)
        if any(not _rounds_to(s.replace("−", "-"), f, T) for s, f in zip(shown, full[key])):
            bad.append(f"{key}: saved {shown}, summary {full[key]}")
    assert not bad, "\n".join(bad)
