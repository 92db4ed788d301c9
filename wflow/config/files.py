"""Configuration files: reading TOML, ``--set`` overrides, and the files generated from the schema.

* :func:`load_toml`, :func:`parse_override`, :func:`apply_overrides`, :func:`default_config`
  (re-exported by :mod:`wflow.config`);
* :func:`toml_document` and :func:`markdown_table` (any table of :mod:`wflow.config.schema`), and the
  two generated files of the repository: ``wflow/data/default.toml`` (:func:`default_toml`,
  written with tomlkit) and the key reference in ``docs/guide.md`` (:func:`markdown_reference`)
  — ``python -m wflow.config write`` regenerates them, ``check`` compares.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import os
import re
import tomllib
from collections.abc import Mapping, Sequence

from wflow.config import schema
from wflow.config.schema import Param, error, show, typename

__all__ = ["load_toml", "parse_override", "apply_overrides", "default_config", "toml_document",
           "markdown_table", "default_toml", "markdown_reference", "generated_files", "main"]

# --------------------------------------------------------------------------------------
# Reading TOML, --set overrides
# --------------------------------------------------------------------------------------

_OVERRIDE_KEY = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


def load_toml(path) -> dict:
    """Read a TOML file with the standard library; every failure is a ConfigError."""
    try:
        name = os.fspath(path)
    except TypeError:
        raise error(f"config file {show(path)}: must be a path (got {typename(path)})") from None
    shown = show(str(name) if not isinstance(name, bytes) else name)
    try:
        with open(name, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise error(f"config file {shown}: file not found") from None
    except IsADirectoryError:
        raise error(f"config file {shown}: is a directory, not a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"config file {shown}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"config file {shown}: not UTF-8 text ({exc.reason} "
                    f"at byte {exc.start})") from None
    except OSError as exc:
        raise error(f"config file {shown}: {exc.strerror or typename(exc)}") from None
    except RecursionError:
        raise error(f"config file {shown}: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        raise error(f"config file {shown}: invalid TOML: {exc}") from None


@functools.lru_cache(maxsize=1)
def _embedded_default() -> dict:
    text = importlib.resources.files("wflow").joinpath("data/default.toml").read_text("utf-8")
    return tomllib.loads(text)


def _merge(base: dict, top: Mapping) -> dict:
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _load_table() -> None:
    """The built-in keys are declared by wflow.config (imported here, not at the top: it
    imports this module)."""
    import wflow.config  # noqa: F401


def default_config() -> dict:
    """The embedded default run (wflow/data/default.toml) merged over the defaults (a copy)."""
    _load_table()
    return _merge(schema.defaults(), _embedded_default())


def parse_override(s: str) -> tuple[list[str], object]:
    """``"solver.dt=0.01"`` -> ``(["solver", "dt"], 0.01)``.

    The value is read as a TOML value (``1`` int, ``0.5`` float, ``true`` bool,
    ``[0, 1]`` list, ``"x"`` string, ``{a = 1}`` table); anything that is not a TOML
    value (a bare word, a path) is taken as a string, and so is a TOML date or time.
    """
    if not isinstance(s, str):
        raise error(f"override {show(s)}: must be a string 'section.key=value' "
                    f"(got {typename(s)})")
    if "=" not in s:
        raise error(f"override {show(s)}: missing '=' (expected 'section.key=value')")
    key, _, text = s.partition("=")
    key = key.strip()
    if not key:
        raise error(f"override {show(s)}: empty key (expected 'section.key=value')")
    if not _OVERRIDE_KEY.match(key):
        raise error(f"override {show(s)}: key {show(key)} must be dotted names made of "
                    "letters, digits, '_' and '-' (e.g. 'solver.dt')")
    text = text.strip()
    if any(c in text for c in "\n\r"):
        raise error(f"override {show(s)}: the value must be on one line")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except RecursionError:
        raise error(f"override {show(s)}: value nested too deeply") from None
    except tomllib.TOMLDecodeError:  # not a TOML value: a bare word, a path, ...
        return key.split("."), text
    except ValueError as exc:  # e.g. an integer literal beyond Python's digit limit
        raise error(f"override {show(s)}: invalid value ({exc})") from None
    if typename(value) in ("date", "datetime", "time"):
        value = text
    return key.split("."), value


def _copy_tree(obj):
    """Copy nested dicts and lists (leaves are shared); other mappings become dicts."""
    if isinstance(obj, Mapping):
        return {k: _copy_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy_tree(v) for v in obj]
    return obj


def apply_overrides(cfg: dict, overrides) -> dict:
    """Apply ``section.key=value`` strings to a copy of ``cfg`` and return the copy.

    Missing tables on the way are created.
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    if not isinstance(cfg, Mapping):
        raise error(f"config = {show(cfg)}: must be a table of sections (got {typename(cfg)})")
    try:
        overrides = list(overrides)
    except TypeError:
        raise error(f"overrides = {show(overrides)}: must be a list of "
                    "'section.key=value' strings") from None
    try:
        out = _copy_tree(cfg)
    except RecursionError:
        raise error("config: nested too deeply") from None
    parsed = [parse_override(o) for o in overrides]
    for (path, value), text in zip(parsed, overrides):
        node = out
        for depth, part in enumerate(path[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            elif not isinstance(nxt, dict):
                where = ".".join(path[: depth + 1])
                raise error(f"override {show(text)}: {where} = {show(nxt)} is not a table")
            node = nxt
        node[path[-1]] = value
    return out


# --------------------------------------------------------------------------------------
# Generated documents
# --------------------------------------------------------------------------------------


def _doc_line(p: Param) -> str:
    if not p.applies:
        return p.doc
    return f"{p.doc} (only with {' and '.join(c.text for c in p.applies)})"


def _rows(plugins: bool = True) -> list[Param]:
    """The table's keys; without ``plugins``, wflow's own (a plug-in weight process's keys are
    those present only with their process, :attr:`~wflow.params.Param.present`)."""
    _load_table()
    return [p for p in schema.params() if plugins or p.present is None]


def toml_document(values: Mapping | None = None, header: Sequence[str] = (), column: int = 29,
                  plugins: bool = True):
    """A tomlkit document of every key, each commented with its one-line doc.

    ``values``: ``{dotted key: value}`` replacing defaults (e.g. the default run's T);
    ``plugins``: include the keys of plug-in weight processes registered in this interpreter.
    """
    import tomlkit

    values = dict(values or {})
    doc = tomlkit.document()
    for line in header:
        doc.add(tomlkit.comment(line))
    rows = _rows(plugins)
    for section, sdoc in schema.sections().items():
        table = tomlkit.table()
        if sdoc:
            table.add(tomlkit.comment(sdoc))
        for p in rows:
            if p.section != section:
                continue
            item = tomlkit.item(values.get(p.key, copy.deepcopy(p.default)))
            item.comment(_doc_line(p))
            item.trivia.comment_ws = " " * max(1, column - len(f"{p.name} = {item.as_string()}"))
            table.add(p.name, item)
        doc.add(tomlkit.nl())
        doc.add(section, table)
    return doc


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(plugins: bool = True) -> str:
    """The key reference: one Markdown table row per key (``plugins``: with the keys of the
    plug-in weight processes registered in this interpreter)."""
    import tomlkit

    rows = ["| key | default | allowed | description |", "|---|---|---|---|"]
    for p in _rows(plugins):
        default = tomlkit.item(copy.deepcopy(p.default)).as_string()
        describe = getattr(p.check, "describe", lambda: "")()
        rows.append(f"| `{p.key}` | `{_md(default)}` | {_md(describe)} | {_md(_doc_line(p))} |")
    return "\n".join(rows)


DEFAULT_RUN_HEADER = (
    "wflow — the default run: every key at its default (`wflow run` with no config file; a file",
    "or a dict gives only what differs). The reference setting of [model §9] (the paper's",
    "Section 6, OU weights) with H = 10 heads and 2 Monte Carlo paths, shortened to T = 2 (400",
    "steps) so that it ends in well under a minute. Generated from the table in",
    "wflow/config/__init__.py by `python -m wflow.config write`.",
)
README_MARKERS = ("<!-- config-keys:begin (generated: python -m wflow.config write) -->",
                  "<!-- config-keys:end -->")


def default_toml() -> str:
    """The text of ``wflow/data/default.toml``, generated from the table (with tomlkit)."""
    import tomlkit


    doc = toml_document({}, DEFAULT_RUN_HEADER, plugins=False)
    return tomlkit.dumps(doc).rstrip("\n") + "\n"


def markdown_reference() -> str:
    """The user guide's key reference (between ``README_MARKERS``): wflow's own keys."""
    return "\n".join([README_MARKERS[0], markdown_table(plugins=False), README_MARKERS[1]])


def generated_files(root=None) -> dict:
    """``{path: text}`` of the files generated from the table: ``wflow/data/default.toml``
    and ``docs/guide.md`` with its key reference between ``README_MARKERS``."""
    from pathlib import Path as _P

    root = _P(root) if root is not None else _P(__file__).resolve().parents[2]
    readme = (root / "docs" / "guide.md").read_text("utf-8")
    a, b = readme.index(README_MARKERS[0]), readme.index(README_MARKERS[1]) + len(README_MARKERS[1])
    return {root / "wflow" / "data" / "default.toml": default_toml(),
            root / "docs" / "guide.md": readme[:a] + markdown_reference() + readme[b:]}


def main(argv=None) -> int:
    """``python -m wflow.config toml|markdown|write|check``: print the
    generated default TOML or key reference, or write (check) the generated files."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m wflow.config", description=main.__doc__)
    p.add_argument("what", choices=("toml", "markdown", "write", "check"))
    args = p.parse_args(argv)
    if args.what == "toml":
        print(default_toml(), end="")
    elif args.what == "markdown":
        print(markdown_reference())
    else:
        stale = [path for path, text in generated_files().items()
                 if path.read_text("utf-8") != text]
        if args.what == "check":
            for path in stale:
                print(f"{path}: out of date (run `python -m wflow.config write`)")
            return 1 if stale else 0
        for path, text in generated_files().items():
            path.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
