"""The pages of the site that live elsewhere in the repository, and the links between them.

The README, the changelog and the study result pages (``experiments/*.md``, figures in
``experiments/figures/<study>/``) are written to be read on a forge, with links relative to
their own folder. At ``builder-inited`` this extension copies them into ``docs/generated/``
with every relative link pointing to the same target from the new place (a page of the site
when the target is one, else the file itself), and appends to each study page the figures of
its folder that the text names without showing. The pages of ``docs/`` get the same link
mapping when read (``source-read``), so ``../experiments/heads.md`` opens the site's page.

It also checks that the configuration key reference of ``docs/guide.md`` is the one generated
from the parameter table (``python -m wflow.config write``): a stale table is a warning, an
error under ``-W``.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path, PurePosixPath

# a child of Sphinx's "sphinx" logger: its warnings go through Sphinx's handlers (-W: errors)
log = logging.getLogger("sphinx.wflow_pages")

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
GENERATED = DOCS / "generated"
IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".gif")

#: the title a copied page gets in the site (its first line replaced)
TITLES = {"README.md": "# Getting started", "experiments/README.md": "# Running the studies"}
#: repository file -> its page in the site (paths relative to the repository root)
PAGES = {"README.md": "docs/generated/readme.md", "CHANGELOG.md": "docs/generated/changelog.md",
         "experiments/README.md": "docs/generated/studies/index.md"}

# inline links and images ``](target)``, and reference definitions ``[label]: target``
_INLINE = re.compile(r"(\]\()([^)\s]+)(\))")
_DEFINITION = re.compile(r"^(\[[^\]]+\]:\s+)(\S+)", re.M)


def study_pages() -> list[str]:
    """The study result pages: every ``experiments/*.md`` but the folder's README."""
    return sorted(p.stem for p in (ROOT / "experiments").glob("*.md") if p.name != "README.md")


def page_map() -> dict[str, str]:
    pages = dict(PAGES)
    for name in study_pages():
        pages[f"experiments/{name}.md"] = f"docs/generated/studies/{name}.md"
    return pages


def rewrite_links(text: str, src: str, dst: str, pages: dict[str, str]) -> str:
    """``text`` of the repository file ``src`` (relative to the root) as read from ``dst``."""
    src_dir, dst_dir = PurePosixPath(src).parent, PurePosixPath(dst).parent

    def target(t: str) -> str:
        if re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I) or t.startswith(("#", "/")):
            return t  # a URL, an anchor of the page itself, an absolute path
        path, _, anchor = t.partition("#")
        resolved = os.path.normpath(src_dir / path).replace(os.sep, "/")
        if resolved.startswith("../") or not (ROOT / resolved).exists():
            return t  # not in the repository: left as written (Sphinx reports it)
        resolved = pages.get(resolved, resolved)
        new = os.path.relpath(resolved, dst_dir).replace(os.sep, "/")
        return new + ("#" + anchor if anchor else "")

    text = _INLINE.sub(lambda m: m.group(1) + target(m.group(2)) + m.group(3), text)
    return _DEFINITION.sub(lambda m: m.group(1) + target(m.group(2)), text)


def _figures_not_shown(name: str, text: str) -> list[str]:
    folder = ROOT / "experiments" / "figures" / name
    if not folder.is_dir():
        return []
    return [p.name for p in sorted(folder.iterdir())
            if p.suffix in IMAGE_SUFFIXES and f"figures/{name}/{p.name}](" not in text
            and f"figures/{name}/{p.name})" not in text]


def study_page(name: str, pages: dict[str, str]) -> str:
    src = f"experiments/{name}.md"
    text = (ROOT / src).read_text("utf-8")
    extra = _figures_not_shown(name, text)
    if extra:
        text = text.rstrip("\n") + "\n\n## Figures\n\n" + "".join(
            f"![{f}](figures/{name}/{f})\n\n*`experiments/figures/{name}/{f}`*\n\n" for f in extra)
    return rewrite_links(text, src, pages[src], pages)


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless the file holds it already (Sphinx rebuilds what changed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text("utf-8") != text:
        path.write_text(text, "utf-8")


def generate(app) -> None:
    pages = page_map()
    for src, dst in pages.items():
        if src.startswith("experiments/") and src != "experiments/README.md":
            text = study_page(PurePosixPath(src).stem, pages)
        else:
            text = rewrite_links((ROOT / src).read_text("utf-8"), src, dst, pages)
        if src in TITLES:
            text = TITLES[src] + "\n" + text.split("\n", 1)[1]
        write_if_changed(ROOT / dst, text)
    stale = GENERATED / "studies"
    for p in stale.glob("*.md"):  # a study page removed from experiments/
        if f"docs/generated/studies/{p.name}" not in pages.values():
            p.unlink()
    check_config_reference()


def check_config_reference() -> None:
    from wflow.config.files import generated_files

    guide = DOCS / "guide.md"
    if generated_files(ROOT)[guide] != guide.read_text("utf-8"):
        log.warning("docs/guide.md: the configuration key reference is not the one generated "
                    "from the parameter table (run `python -m wflow.config write`)")


def map_docs_links(app, docname, source) -> None:
    """``source-read``: the links of a page of ``docs/`` to the repository's pages; in the
    model reference, a label ``model-section-N`` before each section ``§N``."""
    if docname.startswith(("generated/", "auto_examples/", "api")):
        return
    path = f"docs/{docname}.md"
    if (ROOT / path).exists():
        source[0] = rewrite_links(source[0], path, path, page_map())
    if docname == "studies":
        source[0] += study_toctree(source[0])
    if docname == "model":
        source[0] = _SECTION.sub(lambda m: f"(model-section-{m.group(2)})=\n{m.group(1)}",
                                 source[0])


def study_toctree(text: str) -> str:
    """The (hidden) table of contents of the study pages under ``docs/studies.md``: the
    overview, then the pages in the order the text links them, then any other."""
    linked = re.findall(r"generated/studies/(\w+)\.md", text)
    names = [n for n in dict.fromkeys(linked) if n in study_pages()]
    names += [n for n in study_pages() if n not in names]
    entries = "".join(f"generated/studies/{n}\n" for n in ["index", *names])
    return f"\n\n```{{toctree}}\n:hidden:\n:maxdepth: 1\n\n{entries}```\n"


_SECTION = re.compile(r"^(## §(\d+[a-z]?) .*)$", re.M)
_CITATION = re.compile(r"\[model §(\d+[a-z]?)([^\]]*)\]")


def link_citations(app, what, name, obj, options, lines) -> None:
    """``autodoc-process-docstring``: a citation ``[model §N…]`` in a docstring links to
    section N of the model reference (not inside ````literal```` text)."""
    def cite(line):
        out, last = [], 0
        for m in _CITATION.finditer(line):
            if line[:m.start()].count("``") % 2:
                continue
            out.append(line[last:m.start()])
            out.append(f":ref:`[model §{m.group(1)}{m.group(2)}] <model-section-{m.group(1)}>`")
            last = m.end()
        return "".join(out) + line[last:]

    lines[:] = [cite(line) for line in lines]


def setup(app):
    app.connect("builder-inited", generate)
    app.connect("source-read", map_docs_links)
    app.connect("autodoc-process-docstring", link_citations)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
