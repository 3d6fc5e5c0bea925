"""attnmt aer --alignments F --gold F [--json]

Alignment error rate, precision and recall of Pharaoh alignments (``i-j``) against gold alignments
(``i-j`` sure, ``i?j`` possible links); attnmt/eval/alignment.py.
"""

from __future__ import annotations

import argparse

from attnmt.jsonio import dumps


def register(sub: argparse._SubParsersAction) -> None:
    q = sub.add_parser("aer", help="alignment error rate, precision and recall against gold")
    q.add_argument("--alignments", required=True, help="hypothesis alignments (Pharaoh i-j)")
    q.add_argument("--gold", required=True, help="gold alignments: i-j sure, i?j possible")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnmt.eval.alignment import aer, read_alignments

    hyp = [possible for _, possible in read_alignments(args.alignments)]
    result = aer(hyp, read_alignments(args.gold), (args.alignments, args.gold)).as_dict()
    print(dumps(result) if args.json else " ".join(f"{k}={v}" for k, v in result.items()))
    return 0
