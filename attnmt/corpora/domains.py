"""``attnmt data domains``: English corpora of several domains, each split train/dev/test.

| domain | source | text unit |
|---|---|---|
| man | Debian manpages, manpages-dev (rendered with groff) | paragraph |
| pydoc | Debian python3.N-doc HTML (N = this release's Python) | paragraph / list item |
| licenses | licence texts in the scancode-toolkit-mini wheel (PyPI) | paragraph |
| commentary | SWORD commentaries MHCC, TDavid, Scofield (Debian sword-comm-*) | paragraph |
| bible | English side of ``attnmt data bible`` | verse segment |

Data packages are fetched with ``apt-get download`` / ``pip download --no-deps`` into
``DIR/cache`` and unpacked there (no system install); tools (groff, the SWORD reader) are
installed only with ``--install`` (as root). A user's own text joins with ``--add name=path``.

Output: ``DIR/<domain>/{train,dev,test}.txt`` (one paragraph per line) and a manifest per
domain; a domain whose manifest matches is skipped (``--force`` rebuilds). An earlier build of a
domain is replaced; other files of the same names stop the build unless ``--force``
(:func:`attnmt.corpora.outputs.write_build`).

Split rule (:func:`split_lines`), the same for every domain except the Bible: the lines, in
source order, are cut into consecutive blocks of ``b = clamp(n // 200, 1, 200)`` lines; of every
20 consecutive blocks the 10th goes to dev, the 20th to test, the other 18 to train (90/5/5).
Blocks keep neighbouring paragraphs of one document together, so dev/test are not trivially
predictable from train, and spread dev/test over the whole source (every man section, every
commentary). The Bible keeps its book split, so LM and NMT test data never overlap.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path

from attnmt.corpora import debian, domain_text, outputs
from attnmt.data.corpus import read_lines
from attnmt.corpora.sword import SwordTools
from attnmt.errors import UserError

FORMAT = 1
SPLITS = ("train", "dev", "test")
BUILTIN = ("man", "pydoc", "licenses", "commentary", "bible")
SCANCODE = "scancode-toolkit-mini==32.5.0"  # pinned: the licence DB changes between releases
MAN_PACKAGES = ("manpages", "manpages-dev")
COMMENTARIES = {"MHCC": "sword-comm-mhcc", "TDavid": "sword-comm-tdavid",
                "Scofield": "sword-comm-scofield"}
PERIOD, DEV_SLOT, TEST_SLOT = 20, 9, 19
MIN_LINES = PERIOD


def split_lines(lines: Sequence[str]) -> dict[str, list[str]]:
    """Deterministic block split (module docstring): 90 % train, 5 % dev, 5 % test."""
    n = len(lines)
    block = min(200, max(1, n // 200))
    out: dict[str, list[str]] = {s: [] for s in SPLITS}
    for i, line in enumerate(lines):
        slot = (i // block) % PERIOD
        out["dev" if slot == DEV_SLOT else "test" if slot == TEST_SLOT else "train"].append(line)
    return out


def read_text_lines(path: Path) -> list[str]:
    """A user's plain-text file: one unit per line, whitespace collapsed, empty lines dropped.
    Checked as every text input is (attnmt.data.corpus.read_lines: UTF-8, no NUL bytes, ...)."""
    return [text for text in map(domain_text.squash, read_lines(path)) if text]


def parse_add(spec: str) -> tuple[str, Path]:
    """``name=path`` of ``--add``."""
    name, sep, path = spec.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or not path:
        raise UserError(f"--add wants NAME=PATH with NAME of letters, digits, _ . -; got {spec!r}")
    if name in BUILTIN or name == "cache":
        raise UserError(f"--add {name}=...: {name!r} is a built-in domain name; pick another")
    return name, Path(path)


def write_domain(out: Path, lines: list[str], config: dict, info: dict, force: bool = False,
                 splits: dict[str, list[str]] | None = None) -> dict:
    """Split (unless ``splits`` is given) and write one domain; returns per-split counts. An
    earlier build of this domain (another source file, newer packages) is replaced; other files
    of the same names need ``force`` (outputs.write_build)."""
    if splits is None:
        if len(lines) < MIN_LINES:
            raise UserError(f"domain {config['domain']} has {len(lines)} lines; need {MIN_LINES}")
        splits = split_lines(lines)
    counts = {s: {"lines": len(ls), "words": sum(len(x.split()) for x in ls)} for s, ls in splits.items()}
    files = {f"{s}.txt": outputs.text_of(ls) for s, ls in splits.items()}
    outputs.write_build(out, files, config, {**info, "splits": counts}, _settings(config["domain"]), force)
    return counts


def _settings(domain: str) -> dict:
    # a domain's directory is its name: whatever built that domain before may be replaced
    return {"domain": domain}


OUTPUTS = [*(f"{s}.txt" for s in SPLITS), outputs.MANIFEST]


class _Sources:
    """Fetches and unpacks source packages into ``cache`` on first use."""

    def __init__(self, cache: Path, install: bool, mod2imp: str):
        self.cache, self.install, self.mod2imp = cache, install, mod2imp
        self.root = cache / "root"
        self.versions: dict[str, str] = {}

    def debs(self, packages: Iterable[str]) -> Path:
        for deb in debian.download_debs(list(packages), self.cache / "debs", update=self.install):
            debian.extract_deb(deb, self.root)
            self.versions[deb.name.split("_")[0]] = debian.deb_version(deb)
        return self.root

    def tool(self, exe: str, package: str) -> str:
        if shutil.which(exe) is None:
            debian.install_packages([package], f"attnmt data domains ({exe})", self.install)
        found = shutil.which(exe)
        if found is None:
            raise UserError(f"{exe} not found (Debian package {package})")
        return found


def _man(src: _Sources) -> Iterable[str]:
    groff = src.tool("groff", "groff-base")
    return domain_text.man_corpus(src.debs(MAN_PACKAGES) / "usr/share/man", groff)


def _pydoc(src: _Sources) -> Iterable[str]:
    pkg = debian.python_doc_package()
    root = src.debs([pkg])
    html = root / "usr/share/doc" / pkg.removesuffix("-doc") / "html"
    files = sorted(html.rglob("*.html"))
    if not files:
        raise UserError(f"no HTML files in {pkg}", str(html))
    return domain_text.html_corpus(files)


def _licenses(src: _Sources) -> Iterable[str]:
    wheel = debian.pip_download(SCANCODE, src.cache / "wheels")
    src.versions[wheel.name] = SCANCODE.split("==")[1]
    return domain_text.licence_corpus(wheel)


def _commentary(src: _Sources) -> Iterable[str]:
    mod2imp = src.tool(src.mod2imp, "libsword-utils")
    root = src.debs(COMMENTARIES.values())
    tools = SwordTools(mod2imp, str(root / "usr/share/sword"))
    return domain_text.commentary_corpus(tools, COMMENTARIES)


PRODUCERS: dict[str, Callable[[_Sources], Iterable[str]]] = {
    "man": _man, "pydoc": _pydoc, "licenses": _licenses, "commentary": _commentary,
}
SOURCES = {
    "man": list(MAN_PACKAGES), "pydoc": ["python3.N-doc"], "licenses": [SCANCODE],
    "commentary": list(COMMENTARIES.values()),
}


def _bible_domain(out: Path, bible_dir: Path, force: bool, say: Callable[[str], None],
                  build: Callable[[Path], object]) -> dict:
    """The Bible's English side with its book split (built into ``bible_dir`` if needed)."""
    man = outputs.read_manifest(bible_dir)
    if man is None or not outputs.is_complete(bible_dir, man["config"]):
        build(bible_dir)
        man = outputs.read_manifest(bible_dir) or {}
    config = {
        "domain": "bible", "format": FORMAT, "split": "books",
        "source": {s: man["files"][f"{s}.en"] for s in SPLITS},
    }
    if not force and outputs.is_complete(out, config):
        say(f"attnmt: {out}: complete, nothing to do")
        return (outputs.read_manifest(out) or {})["info"]["splits"]
    splits = {s: (bible_dir / f"{s}.en").read_text("utf-8").splitlines() for s in SPLITS}
    return write_domain(out, [], config, {"source": str(bible_dir)}, force, splits)


def _builtin_domain(out: Path, name: str, src: _Sources, force: bool, say: Callable[[str], None]) -> dict:
    config = {"domain": name, "format": FORMAT, "sources": SOURCES[name],
              "split": [PERIOD, DEV_SLOT, TEST_SLOT]}
    if not force and outputs.is_complete(out, config):
        say(f"attnmt: {out}: complete, nothing to do")
        return (outputs.read_manifest(out) or {})["info"]["splits"]
    say(f"attnmt: building domain {name}")
    src.versions = {}  # this domain's sources only
    lines = list(domain_text.unique(PRODUCERS[name](src)))
    return write_domain(out, lines, config, {"versions": dict(sorted(src.versions.items()))}, force)


def _added_domain(out: Path, name: str, path: Path, force: bool, say: Callable[[str], None]) -> dict:
    config = {"domain": name, "format": FORMAT, "source_sha256": outputs.sha256_file(path),
              "split": [PERIOD, DEV_SLOT, TEST_SLOT]}
    if not force and outputs.is_complete(out, config):
        say(f"attnmt: {out}: complete, nothing to do")
        return (outputs.read_manifest(out) or {})["info"]["splits"]
    lines = read_text_lines(path)
    if len(lines) < MIN_LINES:
        raise UserError(f"has {len(lines)} non-empty lines; need at least {MIN_LINES}", str(path))
    return write_domain(out, lines, config, {"source": str(path)}, force)


def _check_bible_dir(bible_dir: Path, used: bool) -> None:
    """--bible names a finished ``attnmt data bible`` output (a typo would otherwise build the whole
    Bible into the mistyped directory, or fail on another build's manifest with a KeyError)."""
    if not used:
        raise UserError("--bible gives the bible domain, which --domains leaves out")
    man = outputs.read_manifest(bible_dir)
    files = man.get("files") if isinstance(man, dict) else None
    if (not isinstance(files, dict) or any(f"{s}.en" not in files for s in SPLITS)
            or not outputs.is_complete(bible_dir, man.get("config", {}))):
        why = "no such directory" if not bible_dir.exists() else "not a complete 'attnmt data bible' output"
        raise UserError(f"--bible: {why} (build one with attnmt data bible --out DIR, or leave "
                        "--bible out to build it in OUT/cache/bible)", str(bible_dir))


def build_domains(
    out: str | Path,
    domains: Sequence[str] = BUILTIN,
    added: Sequence[tuple[str, Path]] = (),
    bible_dir: str | Path | None = None,
    force: bool = False,
    install: bool = False,
    mod2imp: str = "mod2imp",
    say: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> dict[str, dict]:
    """Build the selected built-in domains and the user's ``added`` ones into ``out``.
    Returns ``{domain: {split: {"lines", "words"}}}``."""
    out = Path(out)
    unknown = [d for d in domains if d not in BUILTIN]
    if unknown:
        raise UserError(f"unknown domain(s) {', '.join(unknown)}; built-in: {', '.join(BUILTIN)}")
    names = [n for n, _ in added]
    if len(set(names)) != len(names):
        raise UserError("--add names must be distinct")
    if not domains and not added:  # an empty build that says "done"
        raise UserError("nothing to build: no --domains and no --add")
    if bible_dir is not None:
        _check_bible_dir(Path(bible_dir), "bible" in domains)
    for _, path in added:  # fail on a bad user file before any long download
        read_text_lines(path)
    src = _Sources(out / "cache", install, mod2imp)
    bdir = Path(bible_dir) if bible_dir else out / "cache" / "bible"
    jobs: dict[str, Callable[[], dict]] = {}
    for name in domains:
        if name == "bible":
            from attnmt.corpora.bible import build_bible

            make = partial(build_bible, tools=SwordTools(mod2imp), install=install, force=force, say=say)
            jobs[name] = partial(_bible_domain, out / name, bdir, force, say, make)
        else:
            jobs[name] = partial(_builtin_domain, out / name, name, src, force, say)
    for name, path in added:
        jobs[name] = partial(_added_domain, out / name, name, path, force, say)
    # A domain whose directory holds files that no earlier build of it wrote is built first: when
    # its new files differ from them (--force aside), the run stops before the other domains are
    # written, rather than after hours of downloads and rendering.
    first = [name for name in jobs if outputs.foreign(out / name, OUTPUTS, _settings(name))]
    done = {name: jobs[name]() for name in first + [n for n in jobs if n not in first]}
    result = {name: done[name] for name in jobs}
    for name, counts in result.items():
        say(f"attnmt: {out / name}: " + ", ".join(
            f"{s} {c['lines']} lines / {c['words']} words" for s, c in counts.items()))
    return result
