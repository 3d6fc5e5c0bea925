"""``attnmt data bible``: the English <-> Spanish Bible corpus from Debian's SWORD modules.

Sources (all public domain, see docs/DATA.md): ``sword-text-web`` (engWEB2015eb, World English
Bible) or ``sword-text-kjv`` (engKJV2006eb, King James) for English, ``sword-text-sparv``
(spaRV1909eb, Reina-Valera 1909) for Spanish, read with ``mod2imp`` (libsword-utils).

Pipeline: dump each module, strip markup (:func:`attnmt.corpora.sword.parse_verse`), fix three
Spanish-module quirks (capitalised chapter openings, enclitic pronouns split off by markup,
letter subscriptions appended to epistles' last verses), align KJV <-> Spanish by Strong's
numbers (:mod:`attnmt.corpora.versification`; KJV and the Spanish module share KJV keys), carry
the alignment over to the WEB by key, and split by whole books.

Output in ``DIR``: ``{train,dev,test}.{en,es,keys}`` (line-aligned), ``align_log.tsv`` (every
segment that is not a same-key verse pair, or was dropped) and ``manifest.json``.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnmt.corpora import debian, outputs
from attnmt.corpora.sword import (
    JUNCTION,
    SwordTools,
    book_of,
    imp_verses,
    parse_verse,
    range_key,
    sort_keys,
)
from attnmt.corpora.versification import AlignConfig, Segment, Verse, align_bibles, keep_segment
from attnmt.errors import UserError

FORMAT = 1  # bump when the output of the same sources changes
SPLITS = ("train", "dev", "test")
# Whole books held out: a mix of OT narrative, wisdom, prophets, NT letters.
DEV_BOOKS = ("Josh", "Eccl", "Hos", "Rom")
TEST_BOOKS = ("Judg", "Ruth", "Lam", "Joel", "Heb", "Jas")
MODULES = {  # name -> (SWORD module, Debian package)
    "web": ("engWEB2015eb", "sword-text-web"),
    "kjv": ("engKJV2006eb", "sword-text-kjv"),
    "sparv": ("spaRV1909eb", "sword-text-sparv"),
}
READER_PACKAGE = "libsword-utils"
# An English verse group this much longer/shorter (in words) than the KJV's is a different
# text (WEB Rom 14:23 carries Rom 16:25-27; the WEB lacks the Comma Johanneum of 1 John 5:7).
MAX_LENGTH_RATIO = 3.0


def split_of(key: str) -> str:
    """train/dev/test of a verse or range key, by its book."""
    book = book_of(key)
    return "dev" if book in DEV_BOOKS else "test" if book in TEST_BOOKS else "train"


# ---------------------------------------------------------------- Spanish module quirks

_WORD = re.compile(r"\w+")
ENCLITICS = frozenset(["lo", "la", "le", "los", "las", "les", "me", "te", "se", "nos", "os"])


def _free_word_counts(texts: list[str]) -> Counter[str]:
    """Word counts, not counting words that touch a :data:`JUNCTION`."""
    return Counter(re.findall(rf"(?<![\w{JUNCTION}])\w+(?![\w{JUNCTION}])", " ".join(texts)))


def resolve_junctions(texts: dict[str, str]) -> dict[str, str]:
    """Two word elements written back to back become one word when the second is an enclitic
    pronoun that the module writes attached elsewhere (``condenar|os`` -> ``condenaros``,
    ``oyéndo|lo`` -> ``oyéndolo``, as "oyéndo" never stands alone), else two words
    (``y|la`` -> ``y la``)."""
    freq = _free_word_counts(list(texts.values()))

    def seen(w: str) -> int:
        return sum(freq[v] for v in {w, w.lower(), w.capitalize()})

    def fix(m: re.Match) -> str:
        left, right = m[1], m[2]
        glue = (
            left and right.lower() in ENCLITICS and (seen(left + right) > 0 or seen(left) == 0)
        )
        return left + ("" if glue else " ")

    # the right-hand word is only looked at, so that "a|b|c" sees both junctions
    pat = re.compile(rf"(\w*){JUNCTION}(?=(\w*))")
    return {k: re.sub(r"\s+", " ", pat.sub(fix, t)).strip() for k, t in texts.items()}


_SENTENCE_START = re.compile(r"(?:^|[.:!?]\s)\W*$")


def recase_openings(texts: dict[str, str]) -> dict[str, str]:
    """The module prints each chapter's first word(s) in capitals (``EN el principio``, ``Y
    CONOCIÓ Adam``, after a psalm title ``... su hijo. ¡OH Jehová``). In a chapter's first verse,
    recase the first run of capitalised words that opens the verse or a sentence: each word as
    the module most often writes it elsewhere, capitalised at a sentence start."""
    freq = Counter(_WORD.findall(" ".join(texts.values())))
    out = dict(texts)
    for key, text in texts.items():
        if not key.endswith(".1"):
            continue
        words = list(_WORD.finditer(text))
        start = next(
            (i for i, w in enumerate(words)
             if len(w[0]) > 1 and w[0].isupper() and not w[0].isdigit()),
            None,
        )
        if start is None:
            continue
        # skip back over one-letter capitals ("Y", "Á") that belong to the opening
        first = start
        while first > 0 and len(words[first - 1][0]) == 1 and words[first - 1][0].isupper():
            first -= 1
        if not _SENTENCE_START.search(text[: words[first].start()]):
            continue
        end = start
        while end + 1 < len(words) and words[end + 1][0].isupper() and not words[end + 1][0].isdigit():
            end += 1
        pieces, pos = [], 0
        for w in words[start : end + 1]:
            lower, cap = w[0].lower(), w[0].capitalize()
            new = cap if freq[cap] > freq[lower] else lower
            if _SENTENCE_START.search(text[: w.start()]):
                new = new[:1].upper() + new[1:]
            pieces += [text[pos : w.start()], new]
            pos = w.end()
        out[key] = "".join(pieces) + text[pos:]
    return out


_COLOPHON = re.compile(r"(.*\bAm[eé]n\.)\s+(.*\b(?:escrit|enviad)\w*.*)$", re.IGNORECASE)


def strip_colophons(texts: dict[str, str]) -> dict[str, str]:
    """Drop the subscriptions the module appends to epistles' last verses ("Amén. Fué escrita
    de Corinto á los Romanos ..."): no English module has them in the verse text."""
    last: dict[str, str] = {}
    for key in sort_keys(list(texts)):
        last[book_of(key)] = key
    out = dict(texts)
    for key in last.values():
        m = _COLOPHON.match(texts[key])
        if m:
            out[key] = m[1]
    return out


# ---------------------------------------------------------------- reading modules


def read_module(tools: SwordTools, name: str) -> dict[str, Verse]:
    """Verses of one of :data:`MODULES` (empty slots kept, text ''), with Spanish fixes."""
    module = MODULES[name][0]
    raw = imp_verses(tools.entries(module))
    if not raw:
        raise UserError(f"SWORD module {module} has no verses", tools.module_dir())
    spanish = name == "sparv"
    parsed = {k: parse_verse(r, junction=JUNCTION if spanish else " ") for k, r in raw.items()}
    texts = {k: t for k, (t, _) in parsed.items()}
    if spanish:
        texts = strip_colophons(recase_openings(resolve_junctions(texts)))
    return {k: Verse(k, texts[k], parsed[k][1]) for k in sort_keys(list(parsed))}


def ensure_sources(tools: SwordTools, names: list[str], install: bool = False) -> None:
    """Make sure the reader and the modules are there; apt-get install them only if the user
    asked (``install``), else say which packages are missing."""
    missing = [MODULES[n][1] for n in names if not tools.has_module(MODULES[n][0])]
    if not tools.has_reader():
        missing.append(READER_PACKAGE)
    if not missing:
        return
    custom = tools.mod2imp != "mod2imp" or tools.sword_path is not None
    if custom and not tools.has_reader():
        raise UserError(f"SWORD reader not found: {tools.mod2imp} (Debian package libsword-utils)")
    if custom:
        where = tools.module_dir()
        raise UserError(f"missing SWORD sources: {', '.join(missing)} (Debian packages)", where)
    debian.install_packages(missing, "attnmt data bible", install)
    still = [MODULES[n][0] for n in names if not tools.has_module(MODULES[n][0])]
    if still or not tools.has_reader():
        raise UserError(f"apt-get install did not provide {', '.join(still) or tools.mod2imp}")


# ---------------------------------------------------------------- pairs


@dataclass(frozen=True)
class Pair:
    key: str
    en: str
    es: str


@dataclass(frozen=True)
class LogRow:
    en_keys: tuple[str, ...]
    es_keys: tuple[str, ...]
    dice: float
    kept: bool
    reason: str

    def line(self) -> str:
        en = range_key(self.en_keys) if self.en_keys else "-"
        es = range_key(self.es_keys) if self.es_keys else "-"
        return f"{en}\t{es}\t{self.dice:.2f}\t{int(self.kept)}\t{self.reason}"


def _join(verses: dict[str, Verse], keys: tuple[str, ...]) -> str:
    return " ".join(verses[k].text for k in keys if k in verses and verses[k].text)


def make_pairs(
    kjv: dict[str, Verse],
    spa: dict[str, Verse],
    english: dict[str, Verse] | None = None,
    cfg: AlignConfig | None = None,
) -> tuple[list[Pair], list[LogRow]]:
    """Aligned pairs in canonical order. The alignment is computed KJV <-> Spanish (same key
    system, dense Strong's tagging); ``english`` (e.g. the WEB, keyed like the KJV) replaces
    the KJV text when given. Returns the pairs and the log of unusual segments."""
    keys = [k for k in kjv if k in spa]
    if not keys:
        raise UserError("the English and Spanish modules share no verse keys")
    segs = align_bibles(keys, kjv, spa, cfg or AlignConfig())
    log: list[LogRow] = []
    kept: list[Segment] = []
    for s in segs:
        ok = keep_segment(s)
        if not ok or not s.same_key:
            reason = "realigned" if ok else ("unpaired" if not (s.src and s.tgt) else "low-dice")
            log.append(LogRow(s.src, s.tgt, s.dice, ok, reason))
        if ok:
            kept.append(s)
    if english is None:
        return [Pair(range_key(s.src), _join(kjv, s.src), _join(spa, s.tgt)) for s in kept], log
    pairs = []
    for s in kept:
        if any(not english.get(k) or not english[k].text for k in s.src):
            log.append(LogRow(s.src, s.tgt, s.dice, False, "english-missing"))
            continue
        en, ref = _join(english, s.src), _join(kjv, s.src)
        ratio = len(en.split()) / max(1, len(ref.split()))
        if not 1 / MAX_LENGTH_RATIO <= ratio <= MAX_LENGTH_RATIO:
            log.append(LogRow(s.src, s.tgt, s.dice, False, f"english-length-{ratio:.1f}x"))
            continue
        pairs.append(Pair(range_key(s.src), en, _join(spa, s.tgt)))
    return pairs, log


def split_pairs(pairs: list[Pair]) -> dict[str, list[Pair]]:
    out: dict[str, list[Pair]] = {s: [] for s in SPLITS}
    for p in pairs:
        out[split_of(p.key)].append(p)
    return out


# ---------------------------------------------------------------- the build


def corpus_files(pairs: list[Pair], log: list[LogRow]) -> tuple[dict[str, str], dict]:
    """The split files and the log (name -> text), and the per-split counts."""
    files, counts = {}, {}
    for split, ps in split_pairs(pairs).items():
        for ext, get in (("en", lambda p: p.en), ("es", lambda p: p.es), ("keys", lambda p: p.key)):
            files[f"{split}.{ext}"] = outputs.text_of(get(p) for p in ps)
        counts[split] = {
            "pairs": len(ps),
            "en_words": sum(len(p.en.split()) for p in ps),
            "es_words": sum(len(p.es.split()) for p in ps),
        }
    header = "en_keys\tes_keys\tdice\tkept\treason"
    files["align_log.tsv"] = outputs.text_of([header] + [r.line() for r in log])
    return files, counts


def build_bible(
    out: str | Path,
    english: str = "web",
    tools: SwordTools | None = None,
    install: bool = False,
    force: bool = False,
    say: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> dict:
    """Build the corpus into ``out`` unless an identical complete build is already there. Files
    of the same names that no earlier build of this ``english`` wrote stop it before anything is
    written, unless ``force`` (outputs.write_build). Returns the manifest's info (counts per
    split, sources)."""
    if english not in ("web", "kjv"):
        raise UserError(f"--english must be web or kjv, not {english!r}")
    out = Path(out)
    config = {
        "corpus": "bible", "format": FORMAT, "english": english,
        "dev_books": list(DEV_BOOKS), "test_books": list(TEST_BOOKS),
    }
    if not force and outputs.is_complete(out, config):
        say(f"attnmt: {out}: complete, nothing to do (--force rebuilds)")
        return (outputs.read_manifest(out) or {}).get("info", {})
    tools = tools or SwordTools()
    names = sorted({"kjv", "sparv", english})
    ensure_sources(tools, names, install)
    say("attnmt: reading SWORD modules " + ", ".join(MODULES[n][0] for n in names))
    verses = {n: read_module(tools, n) for n in names}
    say("attnmt: aligning verses")
    pairs, log = make_pairs(
        verses["kjv"], verses["sparv"], None if english == "kjv" else verses[english]
    )
    info = {
        "sources": {
            MODULES[n][0]: {
                "package": MODULES[n][1],
                "version": tools.module_conf(MODULES[n][0]).get("Version", "?"),
                "license": tools.module_conf(MODULES[n][0]).get("DistributionLicense", "?"),
            }
            for n in names
        },
        "pairs": len(pairs),
        "realigned_segments": sum(1 for r in log if r.kept and r.reason == "realigned"),
        "range_keys": sum(1 for p in pairs if "-" in p.key),
    }
    files, counts = corpus_files(pairs, log)
    # an earlier build of the same --english (another format, other module versions) is replaced;
    # anything else of the same names (a user's own train.en, a --english kjv build) needs --force
    outputs.write_build(out, files, config, {**info, "splits": counts},
                        {"corpus": "bible", "english": english}, force)
    say(
        f"attnmt: {out}: {len(pairs)} pairs ("
        + ", ".join(f"{s} {c['pairs']}" for s, c in counts.items()) + ")"
    )
    return {**info, "splits": counts}
