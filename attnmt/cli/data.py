"""``attnmt data <corpus>``: build corpora.

Each corpus is one sub-command: a function ``_add_<name>(sub)`` that adds its parser and sets
``data_run`` to a ``run_<name>(args) -> int``. To add a corpus, write those two functions and
append the adder to :data:`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import sys
import time


def _sword_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mod2imp", default="mod2imp", metavar="PATH",
                   help="SWORD module reader (default: mod2imp from libsword-utils)")
    p.add_argument("--sword-path", default=None, metavar="DIR",
                   help="SWORD module directory (default: the system's, /usr/share/sword)")
    p.add_argument("--no-install", action="store_true",
                   help="never apt-get install missing packages; fail instead")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--force", action="store_true",
                   help="rebuild even if DIR already holds a complete identical build")


# ---------------------------------------------------------------- bible


def _add_bible(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bible",
        help="English-Spanish Bible (WEB or KJV / Reina-Valera 1909), split by book",
        description="Verse-aligned English-Spanish Bible from Debian's SWORD modules, "
        "split by whole books into DIR/{train,dev,test}.{en,es,keys}. See docs/DATA.md.",
    )
    _common(p)
    p.add_argument("--english", choices=["web", "kjv"], default="web",
                   help="English side: WEB-derived (default) or King James")
    _sword_args(p)
    p.set_defaults(data_run=run_bible)


def run_bible(args: argparse.Namespace) -> int:
    from attnmt.data.bible import build_bible
    from attnmt.data.sword import SwordTools

    t0 = time.time()
    build_bible(
        args.out,
        english=args.english,
        tools=SwordTools(args.mod2imp, args.sword_path),
        install=not args.no_install,
        force=args.force,
    )
    print(f"attnmt: data bible done in {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


SUBCOMMANDS = [_add_bible]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help="build corpora (attnmt data CORPUS --help)",
                              description="Build corpora from public sources.")
    sub = p.add_subparsers(dest="data_command", metavar="CORPUS")
    sub.required = True
    for add in SUBCOMMANDS:
        add(sub)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return args.data_run(args)
