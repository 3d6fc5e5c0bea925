"""attnmt translate --model RUN [--input F] [--output F] [--beam K] [--nbest N] [--alignments F] [--int8] [--bf16 | --float32]
attnmt translate --engine ctranslate2 --model DIR ...: a directory `attnmt export` wrote, in CTranslate2"""

from __future__ import annotations

import argparse
import sys

from attnmt.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate text with a trained model")
    p.add_argument("--model", required=True, action="append",
                   help="training run directory (--engine ctranslate2: a directory attnmt export wrote)")
    p.add_argument("--engine", default="attnmt", choices=["attnmt", "ctranslate2"],
                   help="search in attnmt, or in CTranslate2 on an exported model (threads: OMP_NUM_THREADS)")
    p.add_argument("--checkpoint", default="best", help="best, last or a step-NNNNNNNN directory")
    p.add_argument("--raw-weights", action="store_true",
                   help="a run trained with train.ema: its raw weights, not the EMA ones (the default)")
    p.add_argument("--input", "-i", help="source text, one sentence per line (default: stdin)")
    p.add_argument("--output", "-o", help="translations (default: stdout)")
    p.add_argument("--beam", type=int, default=5, help="beam size; 1 = greedy")
    p.add_argument("--nbest", type=int, default=1, help="print N best as 'i ||| text ||| score'")
    p.add_argument("--length-penalty", type=float, default=1.0, help="score / length^alpha")
    p.add_argument("--max-len-ratio", type=float, default=2.0, help="output length limit per source token")
    p.add_argument("--max-len-cap", type=int, default=512,
                   help="hard limit on output pieces per line (raise it to translate whole documents)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--stop", default="best", choices=["best", "complete"],
                   help="beam: a sentence is done when its best extension ends (best, as OpenNMT-py) "
                   "or when it has --beam finished hypotheses (complete)")
    p.add_argument("--workers", type=int, default=0,
                   help="batches searched at once, one CPU thread each (0: one per torch thread on CPU)")
    p.add_argument("--int8", action="store_true",
                   help="CPU search: the output layer as an 8-bit product (faster; scores move "
                   "slightly, see docs/results/race.md)")
    p.add_argument("--bf16", action="store_true",
                   help="CPU search with bfloat16 units (AVX-512 BF16, AMX): the search step's "
                   "products in bfloat16 (faster; scores move slightly, see docs/results/race.md); "
                   "the default there for LSTM and Transformer models")
    p.add_argument("--float32", action="store_true", help="search in float32 even where --bf16 is the default")
    p.add_argument("--alignments", help="write Pharaoh word alignments (i-j) of each output here")
    p.add_argument("--device", default="auto")
    p.add_argument("--ensemble-mode", default="logprob", choices=["logprob", "prob"],
                   help="with several --model: average log-probabilities or probabilities")
    p.add_argument("--replace-unk", action="store_true",
                   help="replace each output <unk> by its most-attended source word")
    p.add_argument("--dict", help="with --replace-unk: src<TAB>tgt word list; known words are translated")
    p.add_argument("--unk-timing", choices=["predicted", "input", "paper"],
                   help="with --replace-unk: attention row of an output word (default: predicted; "
                   "see attnmt/decode/unk_replace.py)")
    p.add_argument("--ngram", help="NgramRes: this n-gram model (built with --vocab-from the run) "
                   "replaces the run's; the neural weights stay as they are")
    p.add_argument("--alpha", type=float, help="NgramRes: fixed weight of the n-gram log-probabilities")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnmt.data.corpus import check_input, check_output, output_group, read_lines, read_stream
    from attnmt.data.corpus import write_lines
    from attnmt.decode.ensemble import load_translator
    from attnmt.runs.loader import truncation_warning

    if args.beam < 1 or args.nbest < 1 or args.nbest > max(args.beam, 1):
        raise UserError("--beam and --nbest must be >= 1 and --nbest <= --beam")
    if (args.dict or args.unk_timing) and not args.replace_unk:  # else silently unused
        raise UserError(f"{'--dict' if args.dict else '--unk-timing'} needs --replace-unk")
    if args.max_len_cap < 1 or args.batch_size < 1:
        raise UserError("--max-len-cap and --batch-size must be at least 1")
    if args.workers < 0:
        raise UserError(f"--workers must be 0 (one per torch thread) or more, got {args.workers}")
    if not (0 < args.max_len_ratio < float("inf") and 0 <= args.length_penalty < float("inf")):
        raise UserError("--max-len-ratio must be > 0 and --length-penalty >= 0 (finite numbers)")
    # outputs are checked before the model loads: a typo should cost nothing
    if args.input:
        check_input(args.input)
    if args.engine == "ctranslate2":
        return _ctranslate2(args)
    from attnmt.runs.checkpoint import EMA_FILE, run_files

    read = [args.input, args.dict, args.ngram, *(f for m in args.model for f in run_files(m))]
    if args.output:
        check_output(args.output, read, "--output")
    if args.alignments:
        check_output(args.alignments, [*read, args.output], "--alignments")
    from attnmt.decode.translate import check_precision_flags, set_search_precision, use_int8_output_layer

    check_precision_flags(args.bf16, args.float32)  # before the model loads, as the other checks
    translator = load_translator(args.model, args.checkpoint, args.device, args.ensemble_mode,
                                 args.ngram, args.alpha, raw_weights=args.raw_weights)
    ema = [run.name for run in translator.runs if run.weights == EMA_FILE]
    if ema:
        print(f"attnmt: using the EMA weights ({EMA_FILE}) of {', '.join(ema)}; --raw-weights for "
              "the raw ones", file=sys.stderr)
    if args.int8:
        use_int8_output_layer(translator.runs)
    set_search_precision(translator.runs, bf16=args.bf16, float32=args.float32)
    from attnmt.kernels.dispatch import search_notes

    for note in search_notes(translator.runs):  # a part on the reference path, and why
        print(f"attnmt: {note}", file=sys.stderr)
    lines = read_lines(args.input) if args.input else read_stream(sys.stdin.buffer, "<stdin>")
    warning = truncation_warning(translator.runs, lines)
    if warning:
        print(f"attnmt: warning: {warning}", file=sys.stderr)
    results = translator.translate(
        lines, beam=args.beam, nbest=args.nbest, batch_size=args.batch_size,
        length_penalty=args.length_penalty, max_len_ratio=args.max_len_ratio,
        with_attention=bool(args.alignments), max_len_cap=args.max_len_cap, stop=args.stop,
        workers=args.workers,
    )
    cut = next((i for i, hyps in enumerate(results)
                if hyps and len(hyps[0].tgt_pieces) >= args.max_len_cap), None)
    if cut is not None:  # an output that stopped at the cap is not a translation
        raise UserError(f"the translation of line {cut + 1} was cut at --max-len-cap "
                        f"{args.max_len_cap} pieces; raise --max-len-cap or split the line",
                        args.input or "<stdin>")
    if args.replace_unk:
        from attnmt.decode.unk_replace import replace_unks_cli

        results = replace_unks_cli(translator, lines, results, args.dict, args.unk_timing or "predicted")
    out_lines = []
    for i, hyps in enumerate(results):
        if not lines[i].strip():
            hyps = []
        if args.nbest > 1:
            out_lines.extend(f"{i} ||| {h.text} ||| {h.score:.4f}" for h in hyps)
        else:
            out_lines.append(hyps[0].text if hyps else "")
    with output_group():  # -o and --alignments: both files or, on a failure, neither
        if args.output:
            write_lines(args.output, out_lines)
        else:
            sys.stdout.write("".join(x + "\n" for x in out_lines))
            sys.stdout.flush()
        if args.alignments:
            write_lines(args.alignments, [hyps[0].pharaoh() if hyps and lines[i].strip() else ""
                                          for i, hyps in enumerate(results)])
    return 0


def _ctranslate2(args: argparse.Namespace) -> int:
    """--engine ctranslate2: the exported directory's tokenizers and CTranslate2's search."""
    from attnmt.data.corpus import check_output, read_lines, read_stream, write_lines
    from attnmt.export.ctranslate2 import translate

    unused = {"--nbest": args.nbest > 1, "--alignments": args.alignments, "--int8": args.int8,
              "--bf16": args.bf16, "--float32": args.float32, "--replace-unk": args.replace_unk,
              "--ngram": args.ngram, "--alpha": args.alpha is not None, "--stop": args.stop != "best",
              "--workers": args.workers, "--checkpoint": args.checkpoint != "best",
              "--ensemble-mode": args.ensemble_mode != "logprob", "a second --model": len(args.model) > 1}
    named = [flag for flag, given in unused.items() if given]
    if named:
        raise UserError(f"--engine ctranslate2 does not take {', '.join(named)} (quantize with attnmt export "
                        "--quantization)")
    if args.output:
        check_output(args.output, [args.input, args.model[0]], "--output")
    lines = read_lines(args.input) if args.input else read_stream(sys.stdin.buffer, "<stdin>")
    device = "auto" if args.device == "auto" else args.device
    out = translate(args.model[0], lines, beam=args.beam, batch_size=args.batch_size,
                    length_penalty=args.length_penalty, max_len_ratio=args.max_len_ratio,
                    max_len_cap=args.max_len_cap, device=device)
    if args.output:
        write_lines(args.output, out)
    else:
        sys.stdout.write("".join(x + "\n" for x in out))
        sys.stdout.flush()
    return 0
