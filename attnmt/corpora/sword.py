"""Reading SWORD Bible/commentary modules: verse keys, ``mod2imp`` output, OSIS markup.

``mod2imp MODULE`` (Debian package libsword-utils) dumps a module as "IMP" text: a line
``$$$Book C:V`` followed by that entry's raw OSIS markup. This module turns that into
``{osis_key: raw}`` and the raw markup into plain text plus the set of Strong's numbers
that tag the entry's words (the alignment signal used by :mod:`attnmt.corpora.versification`).

Keys follow OSIS: ``Book.Chapter.Verse`` with the OSIS book abbreviation, e.g. ``1Sam.3.4``;
a multi-verse segment is a range ``Job.39.27-Job.40.5``.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from attnmt.errors import UserError

# Protestant canon in canonical order: (OSIS abbreviation, SWORD's English book name).
BOOKS: tuple[tuple[str, str], ...] = (
    ("Gen", "Genesis"), ("Exod", "Exodus"), ("Lev", "Leviticus"), ("Num", "Numbers"),
    ("Deut", "Deuteronomy"), ("Josh", "Joshua"), ("Judg", "Judges"), ("Ruth", "Ruth"),
    ("1Sam", "I Samuel"), ("2Sam", "II Samuel"), ("1Kgs", "I Kings"), ("2Kgs", "II Kings"),
    ("1Chr", "I Chronicles"), ("2Chr", "II Chronicles"), ("Ezra", "Ezra"),
    ("Neh", "Nehemiah"), ("Esth", "Esther"), ("Job", "Job"), ("Ps", "Psalms"),
    ("Prov", "Proverbs"), ("Eccl", "Ecclesiastes"), ("Song", "Song of Solomon"),
    ("Isa", "Isaiah"), ("Jer", "Jeremiah"), ("Lam", "Lamentations"), ("Ezek", "Ezekiel"),
    ("Dan", "Daniel"), ("Hos", "Hosea"), ("Joel", "Joel"), ("Amos", "Amos"),
    ("Obad", "Obadiah"), ("Jonah", "Jonah"), ("Mic", "Micah"), ("Nah", "Nahum"),
    ("Hab", "Habakkuk"), ("Zeph", "Zephaniah"), ("Hag", "Haggai"), ("Zech", "Zechariah"),
    ("Mal", "Malachi"),
    ("Matt", "Matthew"), ("Mark", "Mark"), ("Luke", "Luke"), ("John", "John"),
    ("Acts", "Acts"), ("Rom", "Romans"), ("1Cor", "I Corinthians"),
    ("2Cor", "II Corinthians"), ("Gal", "Galatians"), ("Eph", "Ephesians"),
    ("Phil", "Philippians"), ("Col", "Colossians"), ("1Thess", "I Thessalonians"),
    ("2Thess", "II Thessalonians"), ("1Tim", "I Timothy"), ("2Tim", "II Timothy"),
    ("Titus", "Titus"), ("Phlm", "Philemon"), ("Heb", "Hebrews"), ("Jas", "James"),
    ("1Pet", "I Peter"), ("2Pet", "II Peter"), ("1John", "I John"), ("2John", "II John"),
    ("3John", "III John"), ("Jude", "Jude"), ("Rev", "Revelation of John"),
)
OSIS_OF_SWORD = {sword: osis for osis, sword in BOOKS}
BOOK_INDEX = {osis: i for i, (osis, _) in enumerate(BOOKS)}

_KEY = re.compile(r"([1-3]?[A-Z][a-z]+)\.(\d+)\.(\d+)")
_SWORD_KEY = re.compile(r"(.+) (\d+):(\d+)")


def parse_key(key: str) -> tuple[int, int, int]:
    """``"Job.39.27"`` -> ``(book_index, 39, 27)``; sorting by this gives canonical order."""
    m = _KEY.fullmatch(key)
    if not m or m[1] not in BOOK_INDEX:
        raise UserError(f"not a verse key (want Book.Chapter.Verse, e.g. Gen.1.1): {key!r}")
    return BOOK_INDEX[m[1]], int(m[2]), int(m[3])


def book_of(key: str) -> str:
    """OSIS book of a verse or range key (a range never crosses books)."""
    return key.split(".", 1)[0]


def sort_keys(keys: Sequence[str]) -> list[str]:
    return sorted(keys, key=parse_key)


def range_key(keys: Sequence[str]) -> str:
    """Key of a segment: the verse itself, or ``first-last`` for several verses."""
    if not keys:
        raise ValueError("empty segment")
    return keys[0] if len(keys) == 1 else f"{keys[0]}-{keys[-1]}"


def osis_key(sword_key: str) -> str | None:
    """``"I Samuel 3:4"`` -> ``"1Sam.3.4"``; None for module/testament headings, book and
    chapter introductions (chapter or verse 0) and books outside :data:`BOOKS`."""
    m = _SWORD_KEY.fullmatch(sword_key)
    if not m or m[1] not in OSIS_OF_SWORD or int(m[2]) == 0 or int(m[3]) == 0:
        return None
    return f"{OSIS_OF_SWORD[m[1]]}.{int(m[2])}.{int(m[3])}"


def parse_imp(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """IMP text (an iterable of lines, or one string) -> ``(entry_key, raw_markup)`` pairs in
    module order, headings included. Streams: a commentary dump can be hundreds of MB."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    key: str | None = None
    body: list[str] = []
    for line in lines:
        line = line.rstrip("\n")
        if line.startswith("$$$"):
            if key is not None:
                yield key, "\n".join(body).strip("\n")
            key, body = line[3:].strip(), []
        elif key is not None:
            body.append(line)
    if key is not None:
        yield key, "\n".join(body).strip("\n")


def imp_verses(entries: Iterable[tuple[str, str]] | str) -> dict[str, str]:
    """Entries (or IMP text) of a Bible module -> ``{osis_key: raw_markup}``, verses only."""
    out: dict[str, str] = {}
    for key, body in parse_imp(entries) if isinstance(entries, str) else entries:
        k = osis_key(key)
        if k is not None:
            out[k] = body
    return out


# ---------------------------------------------------------------- markup -> text

# a tag | a tag cut off at the end of a damaged entry (dropped) | text, or a lone "<"
_TOKEN = re.compile(r"<(/?)([A-Za-z]\w*)([^>]*?)(/?)>|(<[/A-Za-z][^>]*$)|([^<]+|<)")
_ATTR = re.compile(r"([\w:.-]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
# Elements whose whole content is not verse text: footnotes and cross references, speaker labels
# of the Song of Songs, and (below) non-canonical headings.
_DROPPED = {"note", "speaker", "rdg", "catchWord"}
# Elements that separate words although the markup may have no space beside them.
_BREAKING = {"l", "lg", "lb", "div", "p", "chapter", "milestone", "title", "list", "item",
             "br", "verse", "table", "row", "cell"}
_WORDS = {"w", "transChange"}
_ATTR_NEEDED = {"div", "title", "w", "sync"}
BREAK = "\x01"     # where a dropped/breaking element stood: a space only between two words
JUNCTION = "\x02"  # two word elements written back to back, e.g. </w><transChange>
_OPENERS = "“‘(«¿¡[\"'"
_STRONGS = re.compile(r"\b([GH])0*(\d+)\b")
_USFM = re.compile(r"\\\+?[a-z]+\d?\*? ?")  # stray USFM character markers (KJV: "\nd ", "\+nd*")


def _attrs(s: str) -> dict[str, str]:
    return {m[1]: m[2] if m[2] is not None else m[3] for m in _ATTR.finditer(s)}


def _walk(raw: str, junction: str, block: str) -> tuple[str, frozenset[str]]:
    """Markup -> text with :data:`BREAK`/``block`` marks, and the Strong's numbers seen."""
    out: list[str] = []
    nums: set[str] = set()
    drop_name, drop_depth = "", 0  # the dropped element we are inside, and its nesting depth
    after_word = False  # the last thing seen was the end of a <w>/<transChange>
    for m in _TOKEN.finditer(raw):
        closing, name, attr_text, selfclose, cut, text = m.groups()
        if cut is not None:
            break
        if text is not None:
            if not drop_depth:
                out.append(text)
                after_word = False
            continue
        if drop_depth:
            if name == drop_name and not selfclose:
                drop_depth += -1 if closing else 1
            continue
        attrs = _attrs(attr_text) if attr_text and name in _ATTR_NEEDED else {}
        if name == "div" and attrs.get("type") == "book" and "eID" in attrs:
            break
        if not closing and not selfclose and (
            name in _DROPPED or (name == "title" and attrs.get("canonical") != "true")
        ):
            drop_name, drop_depth = name, 1
            out.append(BREAK)
            after_word = False
            continue
        if name in _WORDS:
            if closing:
                after_word = True
                continue
            if after_word:
                out.append(junction)
            if name == "w" and "lemma" in attrs:
                nums.update(p + n for p, n in _STRONGS.findall(attrs["lemma"]))
        elif name == "sync" and attrs.get("type", "").lower() == "strongs":  # ThML tagging
            nums.update(p + n for p, n in _STRONGS.findall(attrs.get("value", "")))
        elif name in _BREAKING:
            out.append(block)
        after_word = False
    return html.unescape("".join(out)), frozenset(nums)


def parse_verse(raw: str, junction: str = " ") -> tuple[str, frozenset[str]]:
    """Raw OSIS of one entry -> (plain text, Strong's numbers of its words).

    Dropped: footnotes, cross references, speaker labels, headings that are not part of the
    text (canonical psalm titles are kept), everything after a book's closing ``<div>`` (the WEB
    puts its glossary there), USFM leftovers and pilcrows. ``junction`` is what two adjacent word
    elements become (" " by default; :data:`JUNCTION` lets a caller decide per case).
    Strong's numbers are normalised without leading zeros: ``H0430`` -> ``H430``.
    """
    text, nums = _walk(raw, junction, BREAK)
    return _finish(text), nums


def entry_paragraphs(raw: str) -> list[str]:
    """Raw OSIS of a commentary entry -> its paragraphs as plain text (block elements such as
    ``<div type="x-p">``, ``<p>``, ``<lb/>``, list items separate paragraphs; notes and
    headings are dropped)."""
    text, _ = _walk(raw, " ", "\n")
    return [p for p in (_finish(x) for x in text.split("\n")) if p]


def _finish(s: str) -> str:
    s = _USFM.sub("", s).replace("\u00b6", "")
    s = re.sub(r"\s+", " ", s)
    s = re.sub(f"{BREAK}+", BREAK, s)

    def brk(m: re.Match) -> str:
        left, right = m[1], m[2]
        if left.isspace() or right.isspace() or left in _OPENERS:
            return ""
        return " " if right.isalnum() or right in _OPENERS else ""

    s = re.sub(f"(?<=(.)){BREAK}(?=(.))", brk, s)
    return re.sub(r"\s+", " ", s.replace(BREAK, "")).strip()


# ---------------------------------------------------------------- running mod2imp


@dataclass(frozen=True)
class SwordTools:
    """Where the SWORD reader and modules are. ``sword_path`` None = the system's default
    (``/usr/share/sword`` for Debian's packages); otherwise passed as ``SWORD_PATH``."""

    mod2imp: str = "mod2imp"
    sword_path: str | None = None

    def module_dir(self) -> str:
        return self.sword_path or "/usr/share/sword"

    def has_module(self, module: str) -> bool:
        mods = os.path.join(self.module_dir(), "mods.d")
        return os.path.isdir(mods) and any(
            f.lower() == module.lower() + ".conf" for f in os.listdir(mods)
        )

    def has_reader(self) -> bool:
        return shutil.which(self.mod2imp) is not None

    def module_conf(self, module: str) -> dict[str, str]:
        """Key=value lines of the module's .conf (Version, DistributionLicense, ...)."""
        mods = os.path.join(self.module_dir(), "mods.d")
        for f in sorted(os.listdir(mods)) if os.path.isdir(mods) else []:
            if f.lower() == module.lower() + ".conf":
                conf: dict[str, str] = {}
                with open(os.path.join(mods, f), encoding="utf-8", errors="replace") as fh:
                    for line in fh:
                        k, sep, v = line.partition("=")
                        if sep and not line.startswith("#") and k.strip() not in conf:
                            conf[k.strip()] = v.strip()
                return conf
        return {}

    def entries(self, module: str) -> Iterator[tuple[str, str]]:
        """Stream the module's ``(entry_key, raw_markup)`` pairs (``mod2imp MODULE``)."""
        exe = shutil.which(self.mod2imp)
        if exe is None:
            raise UserError(
                f"SWORD reader not found: {self.mod2imp} (Debian package libsword-utils)"
            )
        if not self.has_module(module):
            raise UserError(f"SWORD module {module} not installed", self.module_dir())
        env = dict(os.environ)
        if self.sword_path:
            env["SWORD_PATH"] = self.sword_path
        # stderr to a file: a damaged module makes mod2imp print thousands of read warnings
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                [exe, module], stdout=subprocess.PIPE, stderr=err, env=env,
                encoding="utf-8", errors="replace",
            )
            assert proc.stdout is not None
            n = 0
            with proc.stdout:
                for entry in parse_imp(proc.stdout):
                    n += 1
                    yield entry
            code = proc.wait()
            if code != 0 or n == 0:
                err.seek(0)
                lines = err.read().decode("utf-8", "replace").strip().splitlines()
                raise UserError(
                    f"{self.mod2imp} {module} failed (exit {code}): "
                    + (lines[-1] if lines else "no output")
                )
