"""The built site loads nothing from the network: a check at the end of every HTML build.

The site is read where research code runs, often on a node without network. Every page and
stylesheet of the output folder is scanned once the build has finished: a ``src``, ``href`` or
``data`` attribute of a tag that the browser fetches on load (``script``, ``link`` other than
a plain link relation, ``img``, ``iframe``, ``source``, ``video``, ``audio``, ``embed``,
``object``, ``track``) or a CSS ``url(...)``/``@import`` that names an absolute URL
(``http://``, ``https://`` or ``//host``) fails the build with one line per file. Hyperlinks
(``<a href>``) are what the reader follows, not loads, and are left alone.

The math renderer (MathJax) is shipped with the site by the ``sphinx-mathjax-offline``
extension (``_static/mathjax/``).
"""

from __future__ import annotations

import logging
import re
from html.parser import HTMLParser
from pathlib import Path

# a child of Sphinx's "sphinx" logger: its messages go through Sphinx's handlers (as in
# wflow_pages; the extension imports nothing of Sphinx)
log = logging.getLogger("sphinx.offline_check")

#: tags whose src/href/data the browser fetches when the page loads
LOADING_TAGS = {"script", "link", "img", "iframe", "source", "video", "audio", "embed", "object",
                "track", "input"}
#: <link rel=...> values that only name a related document (nothing is fetched)
LINK_ONLY = {"canonical", "alternate", "author", "license", "help", "next", "prev", "search", "index",
             "up", "bookmark", "me"}
_REMOTE = re.compile(r"^\s*(?:https?:)?//", re.I)
_CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])((?:https?:)?//[^'")\s]+)""", re.I)


class _Loads(HTMLParser):
    """Collects the remote addresses a page loads: ``(tag, address)`` pairs."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.remote: list[tuple[str, str]] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "style":
            self._in_style = True
        if tag not in LOADING_TAGS:
            css = a.get("style", "")
            self.remote += [(f"{tag} style", u) for u in _CSS_URL.findall(css)]
            return
        if tag == "link" and set(a.get("rel", "").lower().split()) <= LINK_ONLY and a.get("rel"):
            return
        for key in ("src", "href", "data", "poster", "srcset"):
            value = a.get(key, "")
            if value and _REMOTE.match(value):
                self.remote.append((tag, value))

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.remote += [("style", u) for u in _CSS_URL.findall(data)]


def remote_loads(outdir: Path) -> dict[str, list[tuple[str, str]]]:
    """Every page (``*.html``) and stylesheet (``*.css``) under ``outdir`` that loads a remote
    address, with the ``(tag, address)`` pairs it loads."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(outdir.rglob("*")):
        if path.suffix == ".html":
            parser = _Loads()
            parser.feed(path.read_text(encoding="utf-8", errors="replace"))
            hits = parser.remote
        elif path.suffix == ".css":
            hits = [("css", u) for u in _CSS_URL.findall(path.read_text(encoding="utf-8", errors="replace"))]
        else:
            continue
        if hits:
            found[path.relative_to(outdir).as_posix()] = hits
    return found


def check_offline(app, exc) -> None:
    """Fails the build (error, exit status 1) when a built file loads a remote address: one line
    per address, with the number of files that load it and one of them."""
    if exc is not None or app.builder.format != "html":
        return
    found = remote_loads(Path(app.outdir))
    if not found:
        return
    where: dict[str, list[str]] = {}
    for page, hits in found.items():
        for _tag, url in hits:
            where.setdefault(url, []).append(page)
    for url, pages in sorted(where.items()):
        log.error("offline check: %d built file(s) load %s (e.g. %s); the site must read without "
                  "network: ship the file in _static/ instead", len(pages), url, pages[0])
    app.statuscode = 1


def setup(app):
    app.connect("build-finished", check_offline, priority=900)  # after the assets are copied
    return {"parallel_read_safe": True, "parallel_write_safe": True}
