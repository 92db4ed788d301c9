"""The model reference's §10 against the tables it describes: the configuration keys (every key
of wflow's table named in its section's row, and every name at the top level of a row a key),
the allowed values of every key with a fixed choice, and the recorded series.

A row of §10 is ``| `[section]` | `key` (explanation), `key`, ...; + `key` ... |``: the key
names are the backticked names outside parentheses; a parenthesis explains the key before it
(its allowed values written as ``"value"``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from wflow.config import files
from wflow.model.processes import PROCESSES
from wflow.params import Choice

ROOT = Path(__file__).resolve().parents[1]


def _section10() -> str:
    text = (ROOT / "docs" / "model.md").read_text("utf-8")
    start = text.index("## §10 ")
    return text[start:text.index("\n## ", start + 1)]


def _keys(cell: str) -> dict:
    """``{key: the text of its parentheses}`` for the backticked names at depth 0."""
    out, depth, last, i = {}, 0, None, 0
    while i < len(cell):
        c = cell[i]
        depth += (c == "(") - (c == ")")
        if (c == "(" and depth == 1) or (c == ")" and depth == 0):  # the outer parentheses
            i += 1
            continue
        if depth == 0 and c == "`":
            j = cell.index("`", i + 1)
            last = cell[i + 1:j]
            out[last] = ""
            i = j + 1
            continue
        if depth > 0 and last is not None:
            out[last] += c
        i += 1
    return out


def _rows() -> dict:
    """``{section: {key: explanation}}`` of §10's table."""
    rows = {}
    for line in _section10().splitlines():
        m = re.match(r"^\| `\[(\w+)\]` \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = _keys(m.group(2))
    return rows


def _table() -> dict:
    """``{section: {name: Param}}``: wflow's own keys (no plug-in process's)."""
    out = {}
    for p in files._rows(plugins=False):
        out.setdefault(p.section, {})[p.name] = p
    return out


def test_the_row_parser_reads_keys_outside_parentheses():
    row = _keys('`a` (`"x"`, `"y"` (nested `z`)), `b`; + `c` (§1)')
    assert row == {"a": '`"x"`, `"y"` (nested `z`)', "b": "", "c": "§1"}


def test_section10_names_every_key_and_only_keys():
    rows, table = _rows(), _table()
    assert set(rows) == set(table), "a section of the table has no row in §10 (or vice versa)"
    for section, params in table.items():
        missing = sorted(set(params) - set(rows[section]))
        extra = sorted(set(rows[section]) - set(params))
        assert not missing, f"[{section}] keys not in docs/model.md §10: {missing}"
        assert not extra, f"[{section}] names in docs/model.md §10 that are not keys: {extra}"


def test_section10_names_every_allowed_value():
    """A key with a fixed choice (and ``weights.process``: the built-in processes) lists each
    allowed value in its parentheses."""
    rows = _rows()
    for section, params in _table().items():
        for name, p in params.items():
            values = [v for v in p.check.values if v != ""] if isinstance(p.check, Choice) else []
            if p.key == "weights.process":
                # the built-in processes (not a study's, named by module path once used)
                values = [n for n, c in PROCESSES.items()
                          if c.__module__.startswith("wflow.model.") and ":" not in n]
            missing = [v for v in values if f'`"{v}"`' not in rows[section][name]]
            assert not missing, f"{p.key}: allowed values not in docs/model.md §10: {missing}"


#: wflow's own series, in a fresh interpreter (no plug-in's, which tests add in this one)
BUILTIN_SERIES = (
    "import json; from wflow.engine.series import SERIES; import wflow.stepping.adaptive; "
    "from wflow.stepping.registry import STEPPER_SERIES; "
    "print(json.dumps([*SERIES, *STEPPER_SERIES]))"
)


def test_section10_names_every_recorded_series():
    text = _section10()
    named = set(re.findall(r"`([A-Za-z_0-9]+)`", text))
    prefixes = re.findall(r"`([A-Za-z_0-9]+)\*`", text)  # step_*, jko_*
    assert prefixes
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", BUILTIN_SERIES], capture_output=True, text=True,
                         check=True, env=env, cwd=ROOT).stdout
    every = json.loads(out.strip().splitlines()[-1])
    assert {"energy", "steps_accepted", "jko_w2", "rho"} <= set(every)
    missing = [n for n in every if n not in named and not n.startswith(tuple(prefixes))]
    assert not missing, f"series not in docs/model.md §10: {missing}"
