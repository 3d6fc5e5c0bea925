"""CTranslate2 4.x for ``benchmarks/peer_race.py``: run with the peer's venv Python (it imports
ctranslate2 and, to convert, the peer's own package; nothing of attnmt).

    python race_ct2.py convert --peer opennmt|eole CKPT OUT_DIR
    python race_ct2.py translate MODEL_DIR SRC_PIECES HYP_PIECES --compute-type int8 --threads 2
        [--beam 5] [--batch 64] [--max-length 250 | --limit 2,10,512]

``convert``: OpenNMT-py Transformer checkpoints through ``converters.opennmt_py.OpenNMTPyConverter``
(its ``torch.load`` is given ``weights_only=False`` for this trusted checkpoint: torch >= 2.6
refuses OpenNMT-py's pickled options otherwise; its default ``self_attn_type: scaled-dot-flash``,
the same attention computed by torch's fused kernel, is passed on as ``scaled-dot``, the one name
the converter accepts), eole checkpoints (a ``step_N`` folder) through
``converters.eole_ct2.EoleConverter``; the weights are stored in float32, and the compute type is
chosen when the model is loaded. ``translate``: the whole test set in one ``translate_batch``
call (beam 5, batches of 64 examples, as the race's other translators; every line at most
``--max-length`` pieces) — the race times this command from outside, start-up and model loading
included. ``--limit RATIO,EXTRA,CAP``: attnmt's length rule instead, min(CAP, ⌈RATIO·|x|⌉ + EXTRA)
pieces for a source of |x| pieces (``attnmt translate``'s defaults: 2,10,512): the lines sorted
by length, longest first, in batches of ``--batch`` as attnmt batches them, each batch with the
limit of its longest line (one ``translate_batch`` per batch, all submitted at once, so the
``inter_threads`` replicas take them side by side). With one global limit a line that never ends
runs to 250 pieces in CTranslate2 and to 2|x| + 10 in attnmt: CTranslate2 then does more work. The last line printed is JSON: the
compute type the Translator chose, its threads, the process's CPU seconds (and per thread:
``busy_threads`` counts the threads with at least a quarter of the busiest one's) and the ISA
CTranslate2 runs its own kernels on (``CT2_FORCE_CPU_ISA`` if set, its choice otherwise).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time


def convert(peer: str, ckpt: str, out: str) -> None:
    if peer == "opennmt":
        import torch

        from ctranslate2.converters.opennmt_py import OpenNMTPyConverter

        load = torch.load

        def trusted_load(*a, **k):  # the race's own checkpoint: its pickled options may load
            ckpt = load(*a, **{**k, "weights_only": False})
            opt = ckpt.get("opt") if isinstance(ckpt, dict) else None
            if getattr(opt, "self_attn_type", None) == "scaled-dot-flash":
                opt.self_attn_type = "scaled-dot"  # the same attention (torch's fused kernel for it),
                # which the converter names only by its plain name
            return ckpt

        torch.load = trusted_load
        try:
            OpenNMTPyConverter(ckpt).convert(out, force=True)
        finally:
            torch.load = load
    else:
        from ctranslate2.converters.eole_ct2 import EoleConverter

        EoleConverter(ckpt).convert(out, force=True)


def thread_cpu_seconds() -> list[float]:
    """CPU seconds of each thread of this process (Linux /proc; [] elsewhere), largest first: how
    many threads did the work, whatever else the machine runs."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out.append((int(fields[11]) + int(fields[12])) / tick)  # utime + stime
    except OSError:
        return []
    return sorted(out, reverse=True)


def translate(model: str, src: str, hyp: str, compute_type: str, threads: int, beam: int, batch: int,
              max_length: int, inter: int = 1, limit: tuple[float, float, int] | None = None) -> dict:
    import ctranslate2

    start = time.perf_counter()
    translator = ctranslate2.Translator(model, device="cpu", compute_type=compute_type,
                                        intra_threads=threads, inter_threads=inter)
    with open(src, encoding="utf-8") as f:
        pieces = [line.split() for line in f]
    if limit is None:
        results = translator.translate_batch(pieces, beam_size=beam, max_batch_size=batch, batch_type="examples",
                                             max_decoding_length=max_length)
    else:
        ratio, extra, cap = limit
        order = sorted(range(len(pieces)), key=lambda i: len(pieces[i]), reverse=True)
        pending = []
        for first in range(0, len(order), batch):
            chunk = order[first : first + batch]
            longest = min(cap, max(math.ceil(ratio * len(pieces[i])) + int(extra) for i in chunk))
            pending.append((chunk, translator.translate_batch(
                [pieces[i] for i in chunk], beam_size=beam, max_batch_size=batch, batch_type="examples",
                max_decoding_length=longest, asynchronous=True)))
        results = [None] * len(pieces)
        for chunk, answers in pending:
            for i, answer in zip(chunk, answers):
                results[i] = answer.result()
    with open(hyp, "w", encoding="utf-8") as f:
        for r in results:
            f.write(" ".join(r.hypotheses[0]) + "\n")
    use = resource.getrusage(resource.RUSAGE_SELF)
    per_thread = thread_cpu_seconds()
    busy = [t for t in per_thread if per_thread and t >= 0.25 * per_thread[0]]
    return {"compute_type": translator.compute_type, "intra_threads": threads, "inter_threads": inter,
            "isa": os.environ.get("CT2_FORCE_CPU_ISA", "auto"), "ctranslate2": ctranslate2.__version__,
            "in_process_s": round(time.perf_counter() - start, 2), "cpu_s": round(use.ru_utime + use.ru_stime, 2),
            "busy_threads": len(busy), "thread_cpu_s": [round(t, 2) for t in per_thread[:4]],
            "limit": list(limit) if limit else max_length,
            "output_pieces": sum(len(r.hypotheses[0]) + 1 for r in results)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--peer", choices=["opennmt", "eole"], required=True)
    c.add_argument("ckpt")
    c.add_argument("out")
    t = sub.add_parser("translate")
    t.add_argument("model")
    t.add_argument("src")
    t.add_argument("hyp")
    t.add_argument("--compute-type", default="int8")
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--beam", type=int, default=5)
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--max-length", type=int, default=250)
    t.add_argument("--inter", type=int, default=1, help="inter_threads: batches translated at once")
    t.add_argument("--limit", help="RATIO,EXTRA,CAP: attnmt's per-line length rule (see above)")
    args = ap.parse_args(argv)
    if args.command == "convert":
        convert(args.peer, args.ckpt, args.out)
        return 0
    limit = None
    if args.limit:
        try:
            ratio, extra, cap = args.limit.split(",")
            limit = (float(ratio), float(extra), int(cap))
        except ValueError:
            print(f"race_ct2: error: --limit must be RATIO,EXTRA,CAP, got {args.limit!r}", file=sys.stderr)
            return 2
    print(json.dumps(translate(args.model, args.src, args.hyp, args.compute_type, args.threads, args.beam,
                               args.batch, args.max_length, args.inter, limit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
