"""Plain-text paragraphs from the domain corpora's raw sources: rendered man pages, HTML
documentation, licence texts, SWORD commentaries. Pure text functions (tested on fixtures)
plus thin readers that walk an unpacked package or a wheel.

Every converter yields one paragraph per item, whitespace collapsed; :func:`is_prose` keeps
paragraphs of running text (at least 5 words, >= 85 % letters and spaces), which drops code,
option tables, addresses and headings.
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterable, Iterator
from html.parser import HTMLParser
from pathlib import Path

from attnmt.corpora.sword import SwordTools, entry_paragraphs
from attnmt.errors import UserError


def squash(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def is_prose(s: str, min_words: int = 5, min_alpha: float = 0.85) -> bool:
    return len(s.split()) >= min_words and sum(c.isalpha() or c == " " for c in s) >= min_alpha * len(s)


def unique(lines: Iterable[str]) -> Iterator[str]:
    """First occurrence of each line (licences and commentaries repeat whole paragraphs)."""
    seen: set[str] = set()
    for line in lines:
        if line not in seen:
            seen.add(line)
            yield line


# ---------------------------------------------------------------- man pages

# Sections that are lists, code or boilerplate rather than prose.
MAN_SKIP_SECTIONS = frozenset({
    "SYNOPSIS", "SEE ALSO", "COLOPHON", "EXAMPLE", "EXAMPLES", "AUTHOR", "AUTHORS", "COPYRIGHT",
    "REPORTING BUGS", "FILES", "VERSIONS", "STANDARDS", "CONFORMING TO", "LIBRARY", "HISTORY",
})


def man_paragraphs(rendered: str) -> Iterator[str]:
    """Prose paragraphs of one man page rendered by groff (``-Tutf8``, one line per
    paragraph): section headings are the unindented all-caps lines; paragraphs are runs of
    indented lines between blank lines; skipped sections: :data:`MAN_SKIP_SECTIONS`."""
    section, para = "", []

    def flush() -> Iterator[str]:
        text = squash(" ".join(para))
        para.clear()
        if section not in MAN_SKIP_SECTIONS and is_prose(text):
            yield text

    for line in rendered.splitlines():
        line = line.rstrip()
        if line and not line[0].isspace():  # a section heading, or the page header/footer
            yield from flush()
            section = line.strip() if line.isupper() else ""
        elif not line.strip():
            yield from flush()
        else:
            para.append(line.strip())
    yield from flush()


def man_page_files(man_root: Path) -> list[Path]:
    """English pages (``manN/*.gz`` directly under ``man_root``), no links, no ``.so`` aliases."""
    out = []
    for p in sorted(man_root.glob("man[1-8]/*.gz")):
        if p.is_symlink() or not p.is_file():
            continue
        with gzip.open(p, "rb") as f:
            head = f.read(300)
        if re.search(rb"^\.so ", head, re.MULTILINE):
            continue
        out.append(p)
    return out


def render_man(path: Path, groff: str = "groff") -> str:
    """groff -man to UTF-8 text with a 2000-column line (a paragraph per line), no
    hyphenation, no bold/underline overstriking."""
    with gzip.open(path, "rb") as f:
        source = f.read()
    cmd = [groff, "-k", "-t", "-e", "-man", "-Tutf8", "-rLL=2000n", "-rHY=0", "-P-cbou"]
    proc = subprocess.run(cmd, input=source, capture_output=True, check=False)
    return proc.stdout.decode("utf-8", errors="replace")


def man_corpus(man_root: Path, groff: str = "groff") -> Iterator[str]:
    if shutil.which(groff) is None:
        raise UserError(f"{groff} not found (Debian package groff-base)")
    for page in man_page_files(man_root):
        yield from man_paragraphs(render_man(page, groff))


# ---------------------------------------------------------------- HTML documentation

_BLOCK = {"p", "div", "li", "dd", "dt", "td", "th", "blockquote", "h1", "h2", "h3", "h4", "h5",
          "h6", "title", "br", "section", "table", "ul", "ol", "dl", "tr", "caption", "figcaption"}
_SKIP = {"pre", "script", "style", "nav", "header", "footer"}
_SKIP_CLASS = re.compile(  # Sphinx navigation, code blocks, "¶" links, tables of contents
    r"(?:^|\s)(?:sphinxsidebar|related|footer|highlight|navigation|headerlink|toctree-wrapper"
    r"|contents)(?:\s|$)"
)
_VOID = {"br", "img", "hr", "meta", "link", "input", "area", "base", "col", "wbr", "source"}


class _Blocks(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.skip_tag, self.skip_depth = "", 0
        self.buf: list[str] = []
        self.blocks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skip_depth:
            if tag == self.skip_tag:
                self.skip_depth += 1
            return
        cls = dict(attrs).get("class") or ""
        if tag not in _VOID and (tag in _SKIP or _SKIP_CLASS.search(cls)):
            if tag in _SKIP or tag in _BLOCK:  # an inline element (a "¶" link) joins its text
                self._flush()
            self.skip_tag, self.skip_depth = tag, 1
        elif tag in _BLOCK:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if self.skip_depth:
            if tag == self.skip_tag:
                self.skip_depth -= 1
                if not self.skip_depth and tag in _BLOCK:
                    self._flush()
            return
        if tag in _BLOCK:
            self._flush()

    def handle_data(self, data: str) -> None:
        if not self.skip_depth:
            self.buf.append(data)

    def _flush(self) -> None:
        text = squash("".join(self.buf))
        self.buf = []
        if text:
            self.blocks.append(text)

    def close(self) -> None:
        super().close()
        self._flush()


def html_paragraphs(html_text: str) -> list[str]:
    """Prose blocks of an HTML page (paragraphs, list items, definitions, table cells,
    headings), skipping code, scripts, navigation and Sphinx sidebars."""
    p = _Blocks()
    p.feed(html_text)
    p.close()
    return [b for b in p.blocks if is_prose(b)]


def html_corpus(files: Iterable[Path]) -> Iterator[str]:
    for f in files:
        yield from html_paragraphs(f.read_text(encoding="utf-8", errors="replace"))


# ---------------------------------------------------------------- licence texts

_FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)


def licence_paragraphs(text: str) -> list[str]:
    """Paragraphs of a ScanCode ``.LICENSE`` file (YAML front matter, then the text); none for
    a licence whose front matter declares a language other than English."""
    m = _FRONT_MATTER.match(text)
    if m and re.search(r"^language: *(?!en\b)\S", m[0], re.MULTILINE):
        return []
    body = text[m.end():] if m else text
    return [s for s in (squash(p) for p in re.split(r"\n\s*\n", body)) if is_prose(s, min_alpha=0.8)]


def licence_corpus(wheel: Path) -> Iterator[str]:
    """Licence paragraphs from the licence DB inside a scancode-toolkit(-mini) wheel; a
    paragraph is kept once even if other licences repeat it (up to case and punctuation)."""
    seen: set[str] = set()
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            if not re.fullmatch(r"licensedcode/data/licenses/[^/]+\.LICENSE", name):
                continue
            for para in licence_paragraphs(z.read(name).decode("utf-8", "replace")):
                key = re.sub(r"[^a-z]", "", para.lower())
                if key not in seen:
                    seen.add(key)
                    yield para


# ---------------------------------------------------------------- SWORD commentaries


def commentary_corpus(tools: SwordTools, modules: Iterable[str]) -> Iterator[str]:
    """Prose paragraphs of SWORD commentary modules. An entry linked to a range of verses is
    stored once per verse, so identical entries are read once."""
    for module in modules:
        seen: set[int] = set()
        for _key, raw in tools.entries(module):
            h = hash(raw)
            if h in seen:
                continue
            seen.add(h)
            for para in entry_paragraphs(raw):
                if is_prose(para, min_alpha=0.8):
                    yield para
