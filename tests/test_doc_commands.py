"""Every documented command names what exists: ``attnmt CMD [SUB] --flag ...`` lines use commands,
sub-commands and flags the CLI has (spelled out, not abbreviations argparse would accept), every
``python benchmarks|experiments/X.py --flag`` uses a flag of that script, and every repository path
the docs name (``configs/*.yaml``, ``attnmt/.../*.py``, ``tests/*.py``, ``docs/*.md`` ...) exists.

Read from README.md, ARCHITECTURE.md, the Makefile, docs/, configs/ and the scripts of benchmarks/ and
experiments/ (their docstrings, comments and help texts name commands). A relative path that climbs
out of its folder, or a markdown link, must name a file inside the repository. The commands are not
run (most need the Bible corpus and minutes to hours); their flags and paths are checked against
the code."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

from attnmt.cli.main import build_parser

ROOT = Path(__file__).parents[1]


def _doc_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "Makefile"]
    files += sorted((ROOT / "docs").rglob("*.md")) + sorted((ROOT / "configs").rglob("*.yaml"))
    files += sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "experiments").glob("*.py"))
    files += sorted((ROOT / "experiments").glob("*.sh"))
    return files


def _cli() -> dict[str, set[str]]:
    """'train' / 'analyse heatmap' -> its option strings; '' -> the top level."""
    out: dict[str, set[str]] = {}

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        out[" ".join(path)] = {s for a in parser._actions for s in a.option_strings}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])

    walk(build_parser(), [])
    return out


def _script_flags(path: Path) -> set[str]:
    """The option strings of every add_argument call in a script (read, not run)."""
    flags = {"-h", "--help"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags |= {a.value for a in node.args
                      if isinstance(a, ast.Constant) and str(a.value).startswith("-")}
    return flags


# The text of one command: up to the end of its inline code span, its line (plus backslash
# continuations), a shell separator, a comment, a redirection or the next command.
_END = re.compile(r";|&&|\|\||\||\s#|\s>|(?<![\w/.-])attnmt\s|(?:benchmarks|experiments)/\w+\.py")
_LONG = re.compile(r"(?<![\w=-])--[a-z0-9][a-z0-9-]*")  # not after "=": an option's value


def _commands(pattern: re.Pattern, files: list[Path],
              root: Path = ROOT) -> list[tuple[str, int, re.Match, str]]:
    """(file, line, match, the command's text after the match) for every match in ``files``."""
    found = []
    for path in files:
        lines = path.read_text(encoding="utf-8").split("\n")
        for i, line in enumerate(lines):
            for m in pattern.finditer(line):
                rest, j = line[m.end():], i
                if line[:m.start()].count("`") % 2:  # inside an inline code span
                    while "`" not in rest and j + 1 < len(lines) and j < i + 3:
                        j += 1
                        rest += " " + lines[j]
                    rest = rest.split("`")[0]
                else:
                    while rest.rstrip().endswith("\\") and j + 1 < len(lines):
                        j += 1
                        rest = rest.rstrip()[:-1] + " " + lines[j]
                rest = re.sub(r"\$\([^)]*\)", " ", rest)  # $(head -n 1 FILE): not this command's flags
                found.append((str(path.relative_to(root)), i + 1, m, _END.split(rest)[0]))
    return found


_ATTNMT = re.compile(r"(?<![\w/.-])attnmt\s+([a-z][a-z-]*)(?:\s+([a-z][a-z-]*))?")
_SCRIPT = re.compile(r"((?:benchmarks|experiments)/\w+\.py)")


def _attnmt_problems(files: list[Path], root: Path = ROOT) -> tuple[list[str], int]:
    cli = _cli()
    commands = {k for k in cli if k and " " not in k}
    groups = {k.split()[0] for k in cli if " " in k}
    bad, checked = [], 0
    for where, line, m, rest in _commands(_ATTNMT, files, root):
        cmd, sub = m.group(1), m.group(2)
        if cmd not in commands:
            continue  # prose: "attnmt is a toolkit", "attnmt ran 4 % faster"
        key = cmd
        if cmd in groups:
            if f"{cmd} {sub}" in cli:
                key = f"{cmd} {sub}"
            else:
                if _LONG.search(rest):  # flags after an unknown sub-command: a misspelled one
                    bad.append(f"{where}:{line}: attnmt {cmd} {sub}: no such sub-command")
                continue
        checked += 1
        for flag in _LONG.findall(rest):
            if flag not in cli[key]:
                bad.append(f"{where}:{line}: attnmt {key} has no {flag}")
    return bad, checked


def _script_problems(files: list[Path], root: Path = ROOT) -> tuple[list[str], int]:
    flags: dict[str, set[str]] = {}
    bad, checked = [], 0
    for where, line, m, rest in _commands(_SCRIPT, files, root):
        script = root / m.group(1)
        if not script.exists():
            bad.append(f"{where}:{line}: {m.group(1)} does not exist")
            continue
        known = flags.setdefault(m.group(1), _script_flags(script))
        for flag in _LONG.findall(rest):
            checked += 1
            if flag not in known:
                bad.append(f"{where}:{line}: {m.group(1)} has no {flag}")
    return bad, checked


def test_attnmt_commands_use_existing_commands_and_flags():
    bad, checked = _attnmt_problems(_doc_files())
    assert not bad, "\n".join(bad)
    assert checked > 100, checked  # the docs' commands were found


def test_script_commands_use_existing_scripts_and_flags():
    bad, checked = _script_problems(_doc_files())
    assert not bad, "\n".join(bad)
    assert checked > 50, checked


def _expand(path: str) -> list[str]:
    """configs/window-{add,mul}[-seg].yaml -> the four paths it names."""
    m = re.search(r"\{([^{}]*)\}|\[([^\[\]]*)\]", path)
    if not m:
        return [path]
    options = m.group(1).split(",") if m.group(1) is not None else ["", m.group(2)]
    return [p for o in options for p in _expand(path[:m.start()] + o + path[m.end():])]


_PATH = re.compile(r"(?<![\w/.$-])((?:\.\./)*(?:attnmt|tests|docs|configs|benchmarks|experiments|\.ci)/"
                   r"[\w./{},\[\]-]*\.(?:py|md|yaml|sh|png))")


# a path that climbs out of its folder, and a markdown link's target (not a URL or an anchor)
_RELATIVE = re.compile(r"(?<![\w./-])((?:\.\./)+[\w./-]*\w)|\]\((?![a-z]+:|#)([^)\s#]+)")


def _missing_paths(path: Path, root: Path = ROOT) -> list[str]:
    doc, missing = path.relative_to(root), []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for m in _PATH.finditer(line):
            for name in _expand(m.group(1)):
                # repository-relative, or relative to the document (docs/results/x.md -> ../DATA.md)
                if not ((root / name).exists() or (path.parent / name).exists()):
                    missing.append(f"{doc}:{n}: {name}")
        for m in _RELATIVE.finditer(line):
            if m.group(2) and path.suffix != ".md":
                continue  # d[key](args) in Python is no link
            # relative to the document, and inside the repository (no folder of one machine's layout)
            target = (path.parent / (m.group(1) or m.group(2))).resolve()
            if not (target.is_relative_to(root.resolve()) and target.exists()):
                missing.append(f"{doc}:{n}: {m.group(1) or m.group(2)}")
    return missing


@pytest.mark.parametrize("doc", [str(p.relative_to(ROOT)) for p in _doc_files()])
def test_named_repository_files_exist(doc):
    missing = _missing_paths(ROOT / doc)
    assert not missing, "\n".join(missing)


def test_the_checks_find_what_they_should(tmp_path):
    doc = tmp_path / "README.md"
    doc.write_text("`attnmt translate --model R --beam-size 5` and `attnmt analyse heatmaps --model R`\n"
                   "    attnmt train configs/x.yaml --out R \\\n        --max-step 3   # --resume\n"
                   "`python benchmarks/lstm_speed.py --round 5` `attnmt score --hyp \"$(head -n 1 F)\"`\n"
                   "`attnmt average --model R --out x=--y`\n"
                   "`python benchmarks/no_such.py` and attnmt is a toolkit --beam\n", encoding="utf-8")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "lstm_speed.py").write_text(
        (ROOT / "benchmarks" / "lstm_speed.py").read_text(encoding="utf-8"), encoding="utf-8")
    rests = {m.group(1): _LONG.findall(rest) for _, _, m, rest in _commands(_ATTNMT, [doc], tmp_path)}
    assert rests["translate"] == ["--model", "--beam-size"]
    assert rests["train"] == ["--out", "--max-step"]  # the continuation line is read, the comment not
    assert rests["score"] == ["--hyp"]  # not head's -n
    assert rests["average"] == ["--model", "--out"]  # --y is --out's value, not an option
    bad, checked = _attnmt_problems([doc], tmp_path)
    assert bad == ["README.md:1: attnmt translate has no --beam-size",
                   "README.md:1: attnmt analyse heatmaps: no such sub-command",
                   "README.md:2: attnmt train has no --max-step"] and checked == 4
    bad, _ = _script_problems([doc], tmp_path)
    assert bad == ["README.md:4: benchmarks/lstm_speed.py has no --round",
                   "README.md:6: benchmarks/no_such.py does not exist"]
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "DATA.md").write_text("", encoding="utf-8")
    note = tmp_path / "docs" / "results" / "x.md"
    note.write_text("[ok](../DATA.md) [gone](../NOTES.md) ../../../shared/papers `docs/DATA.md` "
                    "configs/a-{b,c}.yaml [web](https://example.org/x)\n", encoding="utf-8")
    assert _missing_paths(note, tmp_path) == [
        "docs/results/x.md:1: configs/a-b.yaml", "docs/results/x.md:1: configs/a-c.yaml",
        "docs/results/x.md:1: ../NOTES.md", "docs/results/x.md:1: ../../../shared/papers"]
    assert _expand("configs/window-{add,mul}[-seg].yaml") == [
        "configs/window-add.yaml", "configs/window-add-seg.yaml",
        "configs/window-mul.yaml", "configs/window-mul-seg.yaml"]
