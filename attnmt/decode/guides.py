"""What the user asks of each output besides the search settings: a forced target prefix and
constraint phrases (``translate --prefix FILE --constraints FILE``, a request's ``prefix`` and
``constraints``, ``Model.translate(prefix=..., constraints=...)``).

Both are target text, one entry per input line: a prefix is one string ("" for none), the
constraints of a line a list of phrases (in a file: tab-separated, an empty line for none). The
run's target tokenizer splits them (``Run.target``: lower-cased if the run was trained so); a
piece the target vocabulary lacks is an error naming the file (or field) and line, since forcing
<unk> would not give the text asked for, and so is a special symbol (<s>, </s>).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnmt.data.corpus import read_lines
from attnmt.data.vocab import BOS, EOS, PAD, UNK
from attnmt.errors import UserError

if TYPE_CHECKING:  # the file readers below serve --engine ctranslate2 too, which loads no PyTorch
    from attnmt.runs.loader import Run


@dataclass
class Guides:
    """Per line, target ids of its prefix (``[]``: none) and of each constraint phrase; a field
    is None when no line has one."""

    prefixes: list[list[int]] | None = None
    phrases: list[list[list[int]]] | None = None

    def constrained(self, i: int) -> bool:
        return bool(self.phrases and self.phrases[i])

    def floor(self, i: int) -> int:
        """The fewest output steps line ``i`` needs: its prefix P, its C constraint tokens and
        </s> (decode/prefix.py, decode/constraints.py raise the length limit to P + C + 1)."""
        prefix = len(self.prefixes[i]) if self.prefixes else 0
        return prefix + (sum(map(len, self.phrases[i])) if self.phrases else 0) + 1


def encode_target(run: Run, text: str, what: str, where: str, line: int | None) -> list[int]:
    """Target ids of ``text`` (a prefix or a constraint phrase: ``what``), or a UserError naming
    ``where`` (and ``line``) when a piece is unknown or special."""
    pieces, ids = run.target(text)
    for piece, i in zip(pieces, ids):
        if i == UNK:
            raise UserError(f"{what} {text!r} has {piece!r}, which the model's target vocabulary "
                            "lacks (it could only be forced as <unk>)", where, line)
        if i in (PAD, BOS, EOS):
            raise UserError(f"{what} {text!r} has the special symbol {piece!r}", where, line)
    return ids


def encode_guides(run: Run, count: int, keep: list[int], prefixes: list[str] | None,
                  constraints: list[list[str]] | None, prefix_source: str = "prefixes",
                  constraint_source: str = "constraints", numbered: bool = True) -> Guides:
    """The ``Guides`` of ``count`` lines, of which ``keep`` are decoded (the others' entries are
    ignored). Errors name ``prefix_source``/``constraint_source`` and the 1-based line (with
    ``numbered=False``, the source as given, e.g. ``prefix[2]`` of a request)."""

    def where(source: str, i: int) -> tuple[str, int | None]:
        return (source, i + 1) if numbered else (f"{source}[{i}]", None)

    for given, source in ((prefixes, prefix_source), (constraints, constraint_source)):
        if given is not None and len(given) != count:
            raise UserError(f"{len(given)} entries for {count} lines; give one per line (empty "
                            "for none)", source)
    guides = Guides()
    if prefixes is not None:
        out = [[] for _ in range(count)]
        for i in keep:
            if prefixes[i].strip():
                out[i] = encode_target(run, prefixes[i], "prefix", *where(prefix_source, i))
        guides.prefixes = out if any(out) else None
    if constraints is not None:
        phrases = [[] for _ in range(count)]
        for i in keep:
            line = constraints[i]  # a string is one line of a constraints file
            texts = parse_constraints(line) if isinstance(line, str) else [p for p in line if p.strip()]
            phrases[i] = [encode_target(run, p, "constraint", *where(constraint_source, i)) for p in texts]
        guides.phrases = phrases if any(phrases) else None
    return guides


def read_per_line(path: str, count: int, what: str) -> list[str]:
    """The lines of ``path``, one ``what`` per input line; a UserError naming the file when their
    number differs from the input's ``count``."""
    lines = read_lines(path)
    if len(lines) != count:
        raise UserError(f"{len(lines)} lines, but the input has {count}; give one {what} per "
                        "input line (an empty line for none)", path)
    return lines


def read_prefixes(path: str, count: int) -> list[str]:
    """``translate --prefix FILE``: one target prefix per input line."""
    return read_per_line(path, count, "prefix")


def parse_constraints(line: str) -> list[str]:
    """The phrases of one line of a constraints file: tab-separated, blank ones dropped."""
    return [p.strip() for p in line.split("\t") if p.strip()]


def read_constraints(path: str, count: int) -> list[list[str]]:
    """``translate --constraints FILE``: per input line, its phrases."""
    return [parse_constraints(line) for line in read_per_line(path, count, "line of constraints")]
