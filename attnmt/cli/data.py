"""``attnmt data <corpus>``: build corpora.

Each corpus is one sub-command: a function ``_add_<name>(sub)`` that adds its parser and sets
``func`` to a ``run_<name>(args) -> int`` (attnmt/cli/subcommands.py). To add a corpus, write
those two functions and append the adder to :data:`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import sys
import time

from attnmt.cli.subcommands import add_group


def _sword_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mod2imp", default="mod2imp", metavar="PATH",
                   help="SWORD module reader (default: mod2imp from libsword-utils)")
    p.add_argument("--sword-path", default=None, metavar="DIR",
                   help="SWORD module directory (default: the system's, /usr/share/sword)")
    _install_arg(p)


def _install_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--install", action="store_true",
                   help="apt-get install missing Debian packages (as root; runs apt-get update if "
                   "the lists are stale). Without it nothing on the system changes: a missing "
                   "package stops the build with a message naming it")
    p.add_argument("--no-install", action="store_false", dest="install", help=argparse.SUPPRESS)


def _overwrite_arg(p: argparse.ArgumentParser) -> None:
    # generated sets have no manifest to tell their own files from the user's: a rerun with the
    # same settings rewrites nothing, other content in a file of the same name needs --force
    p.add_argument("--force", action="store_true",
                   help="overwrite files of the same names in DIR that hold other content "
                   "(without it such a file stops the build before anything is written)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    # a build replaces its own earlier output (same settings, files as it wrote them); a file it
    # did not write (a user's own train.en, a build with other settings) needs --force
    p.add_argument("--force", action="store_true",
                   help="rebuild even if DIR already holds a complete identical build, and overwrite "
                   "files of the same names that no earlier build with these settings wrote (without "
                   "it such a file stops the build before anything is written)")


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
    p.set_defaults(func=run_bible)


def run_bible(args: argparse.Namespace) -> int:
    from attnmt.corpora.bible import build_bible
    from attnmt.corpora.sword import SwordTools

    t0 = time.time()
    build_bible(
        args.out,
        english=args.english,
        tools=SwordTools(args.mod2imp, args.sword_path),
        install=args.install,
        force=args.force,
    )
    print(f"attnmt: data bible done in {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- synthetic


def _add_synthetic(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "synthetic",
        help="generated parallel data with gold word alignments (for AER)",
        description="Sentence pairs from a small grammar and dictionary with known reorderings "
        "(adjective-noun swap, verb-final subordinate clauses, one-to-many words), written as "
        "DIR/{train,dev,test}.{src,tgt}, gold alignments DIR/{split}.align (i-j sure, i?j "
        "possible) and the dictionary DIR/lexicon.tsv. See attnmt/corpora/synthetic.py.",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--train", type=int, default=20000, help="training pairs")
    p.add_argument("--dev", type=int, default=500, help="development pairs")
    p.add_argument("--test", type=int, default=500, help="test pairs")
    p.add_argument("--seed", type=int, default=1, help="seed of the lexicon and the sentences")
    p.add_argument("--nouns", type=int, default=80, help="nouns in the lexicon")
    p.add_argument("--adjectives", type=int, default=40, help="adjectives in the lexicon")
    p.add_argument("--verbs", type=int, default=40, help="verbs in the lexicon")
    p.add_argument("--names", type=int, default=600, help="proper names (Zipf-distributed, copied)")
    _overwrite_arg(p)
    p.set_defaults(func=run_synthetic)


def run_synthetic(args: argparse.Namespace) -> int:
    from attnmt.corpora.synthetic import write_synthetic

    sizes = write_synthetic(args.out, {"train": args.train, "dev": args.dev, "test": args.test},
                            args.seed, args.nouns, args.adjectives, args.verbs, args.names,
                            args.force)
    print(f"attnmt: data synthetic: {sizes} pairs in {args.out}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- domains


def _add_domains(sub: argparse._SubParsersAction) -> None:
    from attnmt.corpora.domains import BUILTIN

    p = sub.add_parser(
        "domains",
        help="English text of several domains (man pages, Python docs, licences, "
        "commentaries, Bible), each split train/dev/test",
        description="English corpora of several domains into DIR/<domain>/{train,dev,test}.txt; "
        "a user's plain-text file joins with --add NAME=PATH. See docs/DATA.md.",
    )
    _common(p)
    p.add_argument("--domains", default=",".join(BUILTIN), metavar="LIST",
                   help=f"comma-separated built-in domains, or 'none' (default: {','.join(BUILTIN)})")
    p.add_argument("--add", action="append", default=[], metavar="NAME=PATH",
                   help="also split this UTF-8 text file (one unit per line) as domain NAME; "
                   "repeatable")
    p.add_argument("--bible", default=None, metavar="DIR",
                   help="an 'attnmt data bible' output to take the bible domain from "
                   "(default: built in DIR/cache/bible)")
    p.add_argument("--mod2imp", default="mod2imp", metavar="PATH",
                   help="SWORD module reader (default: mod2imp from libsword-utils)")
    _install_arg(p)
    p.set_defaults(func=run_domains)


def run_domains(args: argparse.Namespace) -> int:
    from attnmt.corpora.domains import build_domains, parse_add

    names = [] if args.domains.strip() == "none" else [
        d.strip() for d in args.domains.split(",") if d.strip()
    ]
    t0 = time.time()
    build_domains(
        args.out,
        domains=names,
        added=[parse_add(a) for a in args.add],
        bible_dir=args.bible,
        force=args.force,
        install=args.install,
        mod2imp=args.mod2imp,
    )
    print(f"attnmt: data domains done in {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- agreement


def _add_agreement(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "agreement",
        help="synthetic long-distance subject-verb agreement (number prediction), TSV splits",
        description="Generated number-prediction data in the spirit of Linzen et al. (2016): "
        "DIR/{train,dev,test}.tsv with text, label (sg/pl), attractors, intervening nouns. "
        "See attnmt/corpora/agreement.py.",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--train", type=int, help="training sentences (default 20000; --hard: 3000)")
    p.add_argument("--test-per-bucket", type=int, default=500,
                   help="dev and test sentences per number of attractors (0..--max-modifiers)")
    p.add_argument("--max-modifiers", type=int, help="most intervening nouns (default 4; --hard: 8)")
    p.add_argument("--filler", type=int, help="up to N extra words per intervening phrase (default 0; --hard: 3)")
    p.add_argument("--train-max-modifiers", type=int,
                   help="most intervening nouns in training sentences (default --max-modifiers; --hard: 5)")
    p.add_argument("--hard", action="store_true",
                   help="the harder task: longer distances, more attractors, fewer training sentences, "
                   "test distances beyond training (explicit flags override its values)")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated sentences")
    _overwrite_arg(p)
    p.set_defaults(func=run_agreement)


def run_agreement(args: argparse.Namespace) -> int:
    from attnmt.corpora.agreement import HARD, write_agreement
    from attnmt.errors import UserError

    base = HARD if args.hard else {"max_modifiers": 4, "filler": 0, "train_max_modifiers": None, "n_train": 20000}
    n_train = base["n_train"] if args.train is None else args.train
    most = base["max_modifiers"] if args.max_modifiers is None else args.max_modifiers
    filler = base["filler"] if args.filler is None else args.filler
    train_most = base["train_max_modifiers"] if args.train_max_modifiers is None else args.train_max_modifiers
    if n_train < 1 or args.test_per_bucket < 1 or not 0 <= most <= 12:
        raise UserError("--train and --test-per-bucket must be >= 1, --max-modifiers in 0..12")
    if filler < 0 or (train_most is not None and not 0 <= train_most <= most):
        raise UserError("--filler must be >= 0 and --train-max-modifiers in 0..--max-modifiers")
    counts = write_agreement(args.out, n_train, args.test_per_bucket, most, args.seed, filler,
                             train_most, args.force)
    print(f"attnmt: data agreement wrote {counts} to {args.out}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- prepare


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="tokenize a corpus once into memory-mapped arrays that training reads (data.prepared)",
        description="Learn the tokenizers on a bounded sample, encode every split with worker "
        "processes into DIR/{split}.{src,tgt}.{ids,off,len}.npy with a manifest, filtering as told; "
        "train with --set data.prepared=DIR. Without --config the defaults are a unigram model of "
        "8000 pieces per side; with --config its data section gives them (flags override). "
        "See attnmt/data/prepare.py.",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (made atomically)")
    p.add_argument("--config", metavar="CONFIG", help="take the corpus and settings from this "
                   "config's data section (and task, train.seed, ngram.domains)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, as attnmt train does (with --config)")
    p.add_argument("--train", nargs="+", metavar="PREFIX[:WEIGHT]",
                   help="training corpora: PREFIX.SRC/PREFIX.TGT, a .tsv, or an LM's text file; "
                   ":WEIGHT samples it WEIGHT times an epoch (in-domain:3)")
    p.add_argument("--dev", nargs="+", metavar="PREFIX", help="development corpus")
    p.add_argument("--task", choices=["translate", "lm"], help="translate (pairs) or lm (text)")
    p.add_argument("--src", help="source suffix (default en)")
    p.add_argument("--tgt", help="target suffix (default es)")
    p.add_argument("--tokenizer", choices=["word", "bpe", "unigram"], help="default unigram")
    p.add_argument("--vocab-size", type=int, help="vocabulary size of both sides (default 8000)")
    p.add_argument("--src-vocab-size", type=int, help="source vocabulary size (default --vocab-size)")
    p.add_argument("--tgt-vocab-size", type=int, help="target vocabulary size (default --vocab-size)")
    p.add_argument("--src-spm", metavar="MODEL", help="use this tokenizer (a sentencepiece model "
                   "with pad 0 unk 1 <s> 2 </s> 3, or a word .vocab) instead of learning one")
    p.add_argument("--tgt-spm", metavar="MODEL", help="the target side's tokenizer, as --src-spm")
    p.add_argument("--lowercase", action="store_true", default=None, help="lower-case all text")
    p.add_argument("--max-len", type=int, help="drop training pairs with a side over N pieces "
                   "(default none; --config: data.max_len)")
    p.add_argument("--max-ratio", type=float, help="drop training pairs whose longer side is over "
                   "R times the shorter (default off)")
    p.add_argument("--drop-identical", action="store_true", default=None,
                   help="drop training pairs whose source and target are the same text")
    p.add_argument("--sample", type=int, help="sentences per side the tokenizers learn from "
                   "(default 2000000; a larger corpus is sampled at random)")
    p.add_argument("--sample-chars", type=int, help="and at most this many characters of them "
                   "(default 64000000: sentencepiece's unigram trainer needs ~21 bytes a character; "
                   "0: no cap)")
    p.add_argument("--seed", type=int, help="seed of the tokenizer sample (default 1)")
    p.add_argument("--keep-text", action="store_true", default=None,
                   help="keep the training text too (data.spm_alpha samples from it)")
    p.add_argument("--workers", type=int, default=0, help="encoding processes (default: one per core)")
    p.add_argument("--force", action="store_true", help="replace an earlier preparation in DIR")
    p.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> int:
    from attnmt.data.prepare import prepare
    from attnmt.data.sources import parse_sources
    from attnmt.errors import UserError

    spec = _prepare_spec(args)
    if args.train is not None:
        spec.train = parse_sources(" ".join(args.train), spec.task, spec.src, spec.tgt, None)
    if args.dev is not None:
        spec.dev = parse_sources(" ".join(args.dev), spec.task, spec.src, spec.tgt, None, key="--dev")
    if not spec.train:
        raise UserError("give --train (or --config with data.train)")
    for flag, value in (("--sample", spec.sample), ("--src-vocab-size", spec.src_vocab_size),
                        ("--tgt-vocab-size", spec.tgt_vocab_size)):
        if value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    if spec.max_len < 0 or spec.max_ratio < 0 or spec.sample_chars < 0 or args.workers < 0:
        raise UserError("--max-len, --max-ratio, --sample-chars and --workers must be >= 0")
    spec.workers = args.workers
    t0 = time.time()
    manifest = prepare(spec, args.out, force=args.force, progress=sys.stderr.isatty())
    pairs = manifest["splits"]["train"]["pairs"]
    print(f"attnmt: data prepare: {pairs:,} training {'lines' if spec.task == 'lm' else 'pairs'} "
          f"in {args.out} ({time.time() - t0:.0f} s); train with --set data.prepared={args.out}",
          file=sys.stderr)
    return 0


def _prepare_spec(args: argparse.Namespace):
    """The preparation the flags ask for: --config's data section, then each flag given."""
    from attnmt.data.prepare import PrepareSpec
    from attnmt.train.data import spec_from_config
    from attnmt.errors import UserError

    spec = PrepareSpec(train=[])
    if args.config:
        from attnmt.config import load_config

        cfg = load_config(args.config, args.overrides)
        if cfg.task not in ("translate", "lm"):
            raise UserError(f"task {cfg.task} is not prepared (a classification set is read as it is)",
                            args.config)
        spec = spec_from_config(cfg, corpora=args.train is None)
    elif args.overrides:
        raise UserError("--set needs --config")
    for name, value in (("task", args.task), ("src", args.src), ("tgt", args.tgt),
                        ("tokenizer", args.tokenizer), ("src_vocab_size", args.src_vocab_size or args.vocab_size),
                        ("tgt_vocab_size", args.tgt_vocab_size or args.vocab_size),
                        ("lowercase", args.lowercase), ("max_len", args.max_len),
                        ("max_ratio", args.max_ratio), ("drop_identical", args.drop_identical),
                        ("sample", args.sample), ("sample_chars", args.sample_chars), ("seed", args.seed),
                        ("keep_text", args.keep_text)):
        if value is not None:
            setattr(spec, name, value)
    spec.given.update({side: path for side, path in (("src", args.src_spm), ("tgt", args.tgt_spm)) if path})
    return spec


SUBCOMMANDS = [_add_bible, _add_synthetic, _add_domains, _add_agreement, _add_prepare]


def register(subparsers: argparse._SubParsersAction) -> None:
    add_group(subparsers, "data", SUBCOMMANDS, help="build corpora (attnmt data CORPUS --help)",
              description="Build corpora from public sources.", metavar="CORPUS")
