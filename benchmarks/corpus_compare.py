"""Compare a built Bible corpus (``attnmt data bible``) or domain corpus (``attnmt data
domains``) with a reference copy REF_DIR, e.g. the team's prepared copy of the corpora.

    python benchmarks/corpus_compare.py bible BUILT_DIR REF_DIR [--english web|kjv]
    python benchmarks/corpus_compare.py domains BUILT_DIR REF_DIR

bible: REF_DIR holds ``{english}-sparv.{split}.tsv`` (key, english, spanish); reports pairs per
split on both sides, keys in common, and the fraction of reference pairs that are identical
(same key, same English, same Spanish). domains: REF_DIR holds ``<domain>_en.txt``; reports
lines and words per domain (all splits of the build together) and the fraction of the
reference's lines found verbatim in the build.

Prints one JSON line, then a one-line summary.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SPLITS = ("train", "dev", "test")


def _lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [x.rstrip("\n") for x in f]


def compare_bible(built: Path, ref: Path, english: str) -> dict:
    out: dict = {"kind": "bible", "english": english, "splits": {}}
    mine, theirs = {}, {}
    for s in SPLITS:
        rows = list(zip(_lines(built / f"{s}.keys"), _lines(built / f"{s}.en"), _lines(built / f"{s}.es")))
        mine.update({k: (e, x) for k, e, x in rows})
        ref_rows = [r.split("\t") for r in _lines(ref / f"{english}-sparv.{s}.tsv")]
        theirs.update({k: (e, x) for k, e, x in ref_rows})
        out["splits"][s] = {"built": len(rows), "reference": len(ref_rows)}
    common = [k for k in theirs if k in mine]
    same = sum(mine[k] == theirs[k] for k in common)
    out.update(
        built=len(mine), reference=len(theirs), common_keys=len(common),
        only_built=sorted(set(mine) - set(theirs)), only_reference=sorted(set(theirs) - set(mine)),
        identical=same, identical_fraction=round(same / max(1, len(theirs)), 4),
        english_differs=sum(mine[k][0] != theirs[k][0] for k in common),
        spanish_differs=sum(mine[k][1] != theirs[k][1] for k in common),
    )
    return out


def compare_domains(built: Path, ref: Path) -> dict:
    out: dict = {"kind": "domains", "domains": {}}
    for ref_file in sorted(ref.glob("*_en.txt")):
        name = ref_file.name[: -len("_en.txt")]
        d = built / name
        if not d.is_dir():
            continue
        lines = [x for s in SPLITS for x in _lines(d / f"{s}.txt")]
        ref_lines = _lines(ref_file)
        have = set(lines)
        out["domains"][name] = {
            "built_lines": len(lines), "reference_lines": len(ref_lines),
            "built_words": sum(len(x.split()) for x in lines),
            "reference_words": sum(len(x.split()) for x in ref_lines),
            "reference_lines_found": round(sum(x in have for x in ref_lines) / max(1, len(ref_lines)), 4),
            "splits": {s: len(_lines(d / f"{s}.txt")) for s in SPLITS},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["bible", "domains"])
    ap.add_argument("built", type=Path)
    ap.add_argument("ref", type=Path)
    ap.add_argument("--english", default="web", choices=["web", "kjv"])
    a = ap.parse_args()
    if a.kind == "bible":
        r = compare_bible(a.built, a.ref, a.english)
        print(json.dumps(r, ensure_ascii=False))
        print(
            f"bible/{a.english}: built {r['built']} pairs vs reference {r['reference']} "
            + ", ".join(f"{s} {v['built']}/{v['reference']}" for s, v in r["splits"].items())
            + f"; identical {r['identical']} ({100 * r['identical_fraction']:.2f}%)"
        )
    else:
        r = compare_domains(a.built, a.ref)
        print(json.dumps(r, ensure_ascii=False))
        print("; ".join(
            f"{n}: {v['built_words'] / 1e6:.2f}M words vs {v['reference_words'] / 1e6:.2f}M, "
            f"{100 * v['reference_lines_found']:.1f}% of reference lines found"
            for n, v in r["domains"].items()
        ))


if __name__ == "__main__":
    main()
