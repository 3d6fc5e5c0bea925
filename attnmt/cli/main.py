"""The ``attnmt`` command line.

Each command lives in its own module under ``attnmt/cli/`` and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` to a callable taking the parsed arguments and returning an
exit status. Commands with sub-commands (data, ngram, analyse, experiment) set ``func`` on each
sub-command's parser (attnmt/cli/subcommands.py). Adding a command = adding a module name to
COMMANDS. Commands parse arguments and print; the work is done by the library. ``attnmt
--user-dir DIR COMMAND`` (or ``COMMAND ... --user-dir DIR``) imports the plug-ins in DIR first
(attnmt/plugins.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from attnmt import plugins
from attnmt.errors import UserError

# Module names under attnmt.cli, in the order their commands appear in --help.
COMMANDS = [
    "train",
    "translate",
    "score",
    "rerank",
    "data",
    "ngram",
    "serve",
    "align",
    "aer",
    "average",
    "export",
    "analyse",
    "experiment",
    "eval",
]


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default, except where there is none to show (None, an
    off switch) or its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or action.default in (None, False, argparse.SUPPRESS)
                or "default" in text.lower() or isinstance(action, argparse._VersionAction)):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors (a bad flag value, a missing option) as the one line every
    other error is, ``attnmt: error: ...``, exit status 2; ``--help`` shows the usage and every
    option's default (the sub-commands' parsers are of this class too)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        command = self.prog.removeprefix("attnmt").strip()
        where = f"{command}: " if command else ""
        self.exit(2, f"attnmt: error: {where}{' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from attnmt import __version__

    parser = _Parser(
        prog="attnmt", description="Attention-based neural text generation toolkit."
    )
    parser.add_argument("--user-dir", metavar="DIR",
                        help="import every module in DIR before the command runs: plug-ins that register "
                             "attention variants, scores or kernels (a run records DIR and imports it again)")
    parser.add_argument("--version", action="version", version=f"attnmt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"attnmt.cli.{name}").register(sub)
    for command in _leaf_parsers(sub):  # also after the command, where users put options
        command.add_argument("--user-dir", metavar="DIR", default=argparse.SUPPRESS,
                             help="as attnmt --user-dir DIR: import the plug-ins in DIR first")
    return parser


def _leaf_parsers(sub: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    """The parsers of every command and sub-command (``data prepare``, ``ngram build``, ...)."""
    leaves = []
    for parser in dict.fromkeys(sub.choices.values()):  # aliases share a parser
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        leaves += [leaf for action in nested for leaf in _leaf_parsers(action)] if nested else [parser]
    return leaves


def main(argv: list[str] | None = None, *, program: bool = False) -> int:
    """Run one command; returns its exit status. ``program``: this call is the process (the
    ``attnmt`` script, ``python -m attnmt``): a command whose parser sets ``quick_exit`` (one that
    has written and closed all it writes when it returns: translate) then ends the process at
    once, after flushing stdout and stderr, without the interpreter's teardown (freeing torch's
    memory and modules: 0.3–0.6 s after a translation, docs/results/race.md)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    status = _run(args)
    if program and getattr(args, "quick_exit", False):
        _exit_now(status)
    return status


def entry() -> None:
    """The ``attnmt`` script's entry point."""
    raise SystemExit(main(program=True))


def _exit_now(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more reaches it anyway
            pass
    os._exit(status)


def _run(args: argparse.Namespace) -> int:
    from attnmt.progress import show_progress

    try:
        # a command that may run long (translate, score, ...): progress bars where stderr is a terminal
        with plugins.command_line(getattr(args, "user_dir", None)), show_progress(getattr(args, "progress", False)):
            status = args.func(args)
    except UserError as err:
        print(f"attnmt: error: {' '.join(str(err).split())}", file=sys.stderr)  # one line, always
        return 2
    except KeyboardInterrupt:
        print("attnmt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as err:
        # a path that names a directory, a missing folder, no permission, a full disk: the
        # readers check what they can; this names the file for the rest
        if err.filename is None:
            raise
        where = f"{err.filename} -> {err.filename2}" if err.filename2 else err.filename
        print(f"attnmt: error: {where}: {err.strerror or err}", file=sys.stderr)
        return 2
    return int(status or 0)


if __name__ == "__main__":
    entry()
