"""attnmt translate --model RUN [--input F] [--output F] [--beam K] [--nbest N] [--alignments F] [--int8] [--bf16 | --float32]
[--prefix F] [--constraints F] [--sample topk=K|topp=P --temperature T --seed S]
attnmt translate --engine ctranslate2 --model DIR ...: a directory `attnmt export` wrote, in CTranslate2

The search settings become one ``decode.options.SearchOptions``, checked there (bounds and
reasons in attnmt/decode/options.py); the Translator owns blank lines and the length cap."""

from __future__ import annotations

import argparse
import sys

from attnmt.decode.options import SearchOptions
from attnmt.errors import UserError

SEARCH = SearchOptions()  # the defaults of every door (attnmt/decode/options.py); flags change them


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate text with a trained model")
    p.add_argument("--model", required=True, action="append",
                   help="training run directory (--engine ctranslate2: a directory attnmt export wrote)")
    p.add_argument("--engine", default="attnmt", choices=["attnmt", "ctranslate2"],
                   help="search in attnmt, or in CTranslate2 on a model attnmt export wrote (on a CPU: "
                   "one single-threaded replica per core, batches of 16; attnmt/export/ct2_translate.py)")
    p.add_argument("--inter-threads", type=int, metavar="N", help="--engine ctranslate2: translator "
                   "replicas searching batches side by side (default: one per core on a CPU)")
    p.add_argument("--intra-threads", type=int, metavar="N", help="--engine ctranslate2: threads of "
                   "each replica (default: 1 on a CPU)")
    p.add_argument("--checkpoint", default="best", help="best, last or a step-NNNNNNNN directory")
    p.add_argument("--raw-weights", action="store_true",
                   help="a run trained with train.ema: its raw weights, not the EMA ones (the default)")
    p.add_argument("--input", "-i", help="source text, one sentence per line (default: stdin)")
    p.add_argument("--output", "-o", help="translations (default: stdout)")
    p.add_argument("--beam", type=int, help=f"beam size; 1 = greedy (default: {SEARCH.beam})")
    p.add_argument("--nbest", type=int, help="print the N best of each line as 'LINE ||| TEXT ||| SCORE', "
                   "LINE 1-based; the first of each line is what --nbest 1 prints (default: 1)")
    p.add_argument("--length-penalty", type=float,
                   help=f"rank by log p / length^alpha (default: {SEARCH.length_penalty})")
    p.add_argument("--max-len-ratio", type=float,
                   help=f"output length limit per source token (default: {SEARCH.max_len_ratio})")
    p.add_argument("--max-len-cap", type=int, help="hard limit on output pieces per line (raise it to "
                   f"translate whole documents; default: {SEARCH.max_len_cap})")
    p.add_argument("--batch-size", type=int, help="sentences searched together, longest first "
                   f"(memory and speed; with --sample also the draws) (default: {SEARCH.batch_size})")
    p.add_argument("--stop", choices=["best", "complete"],
                   help="beam: a sentence is done when its best extension ends (best, as OpenNMT-py) "
                   f"or when it has --beam finished hypotheses (complete) (default: {SEARCH.stop})")
    p.add_argument("--workers", type=int,
                   help="batches searched at once, each by its own process on one CPU thread "
                   "(default 0: one per torch thread on CPU)")
    p.add_argument("--int8", action="store_true",
                   help="CPU search: the output layer (a Transformer: every map) "
                   "as 8-bit products (faster; scores move slightly, see docs/results/race.md)")
    p.add_argument("--bf16", action="store_true",
                   help="CPU search with bfloat16 units (AVX-512 BF16, AMX): the search step's "
                   "products in bfloat16 (faster; scores move slightly, see docs/results/race.md); "
                   "the default there for LSTM and Transformer models")
    p.add_argument("--float32", action="store_true", help="search in float32 even where --bf16 is the default")
    p.add_argument("--prefix", metavar="FILE",
                   help="one target prefix per input line (target text; empty line: none); "
                   "each output starts with its prefix")
    p.add_argument("--constraints", metavar="FILE",
                   help="per input line, target phrases the output must contain, tab-separated "
                   "(empty line: none); lexically constrained beam search (dynamic beam allocation)")
    p.add_argument("--sample", metavar="topk=K|topp=P",
                   help="sample each output instead of searching (back-translation): from the K most "
                   "likely tokens, or the fewest whose probability reaches P")
    p.add_argument("--temperature", type=float, help="with --sample: softmax(logits / T) (default 1)")
    p.add_argument("--seed", type=int, help="with --sample: random seed (same seed, input and "
                   "--batch-size: same outputs)")
    p.add_argument("--alignments", help="write Pharaoh word alignments (i-j) of each output here")
    p.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda or cuda:N")
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
    p.set_defaults(func=run, quick_exit=True, progress=True)  # cli/main.py: no teardown after the output is written


def search_options(args: argparse.Namespace) -> SearchOptions:
    """The command's search settings: ``SearchOptions()`` (the API's and the server's defaults
    too) changed by the flags given, validated (errors name the flag)."""
    from attnmt.decode.options import check_precision_flags, cli_flag

    check_precision_flags(args.bf16, args.float32)
    given = {name: getattr(args, name) for name in (
        "beam", "nbest", "length_penalty", "max_len_ratio", "max_len_cap", "stop", "batch_size",
        "workers", "sample", "temperature", "seed") if getattr(args, name) is not None}
    if args.bf16 or args.float32:
        given["precision"] = "bf16" if args.bf16 else "float32"
    return SEARCH.with_(cli_flag, with_attention=bool(args.alignments), int8=args.int8, **given)


def run(args: argparse.Namespace) -> int:
    # what --engine ctranslate2 runs imports no PyTorch (a second or two of start-up)
    from attnmt.data.corpus import check_input

    options = search_options(args)
    if (args.dict or args.unk_timing) and not args.replace_unk:  # else silently unused
        raise UserError(f"{'--dict' if args.dict else '--unk-timing'} needs --replace-unk")
    # inputs and outputs are checked before the model loads: a typo should cost nothing
    for path in (args.input, args.prefix, args.constraints):
        if path:
            check_input(path)
    if args.engine == "ctranslate2":
        return _ctranslate2(args, options)
    for flag in ("inter_threads", "intra_threads"):
        if getattr(args, flag) is not None:
            raise UserError(f"--{flag.replace('_', '-')} is for --engine ctranslate2 (attnmt's own "
                            "search: --workers)")
    from attnmt.data.corpus import check_output, output_group, read_lines, read_stream, write_lines
    from attnmt.decode.ensemble import load_translator
    from attnmt.decode.guides import read_constraints, read_prefixes
    from attnmt.decode.translate import OutputCut
    from attnmt.runs.checkpoint import EMA_FILE, run_files
    from attnmt.runs.loader import truncation_warning

    read = [args.input, args.dict, args.ngram, args.prefix, args.constraints,
            *(f for m in args.model for f in run_files(m))]
    if args.output:
        check_output(args.output, read, "--output")
    if args.alignments:
        check_output(args.alignments, [*read, args.output], "--alignments")
    translator = load_translator(args.model, args.checkpoint, args.device, args.ensemble_mode,
                                 args.ngram, args.alpha, raw_weights=args.raw_weights)
    ema = [run.name for run in translator.runs if run.weights == EMA_FILE]
    if ema:
        print(f"attnmt: using the EMA weights ({EMA_FILE}) of {', '.join(ema)}; --raw-weights for "
              "the raw ones", file=sys.stderr)
    for note in filter(None, (run.raw_weights_note() for run in translator.runs)):
        print(f"attnmt: warning: {note}", file=sys.stderr)
    precision = translator.prepare(options)  # --int8 / precision errors before the input is read
    translator.fork_workers = True  # a command of its own: its batches may go to forked processes
    from attnmt.kernels.dispatch import search_notes

    for note in search_notes(translator.runs):  # a part on the reference path, and why
        print(f"attnmt: {note}", file=sys.stderr)
    name = args.input or "<stdin>"
    lines = read_lines(args.input) if args.input else read_stream(sys.stdin.buffer, name)
    prefixes = read_prefixes(args.prefix, len(lines)) if args.prefix else None
    constraints = read_constraints(args.constraints, len(lines)) if args.constraints else None
    warning = truncation_warning(translator.runs, lines)
    if warning:
        print(f"attnmt: warning: {warning}", file=sys.stderr)
    if not lines:  # an empty shard of a pipeline is no error: say so, write an empty output
        print(f"attnmt: warning: {name} is empty: nothing to translate", file=sys.stderr)
    try:
        results = translator.translate(lines, options, prefixes=prefixes, constraints=constraints,
                                       prefix_source=args.prefix or "--prefix",
                                       constraint_source=args.constraints or "--constraints")
    except OutputCut as cut:  # named as the user named it: the input file and the flag
        raise UserError(f"the translation of line {cut.line} was cut at --max-len-cap {cut.cap} "
                        "pieces; raise --max-len-cap or split the line", name) from None
    if args.replace_unk:
        from attnmt.decode.unk_replace import replace_unks_cli

        results = replace_unks_cli(translator, lines, results, args.dict, args.unk_timing or "predicted")
    from attnmt.eval.nbest import format_entry

    out_lines = []
    for i, hyps in enumerate(results):  # a blank line has no hypotheses: an empty output line
        if options.nbest > 1:  # LINE 1-based, as every line number attnmt prints
            out_lines.extend(format_entry(i + 1, h.text, h.score) for h in hyps)
        else:
            out_lines.append(hyps[0].text if hyps else "")
    with output_group():  # -o and --alignments: both files or, on a failure, neither
        if args.output:
            write_lines(args.output, out_lines)
        else:
            sys.stdout.write("".join(x + "\n" for x in out_lines))
            sys.stdout.flush()
        if args.alignments:
            write_lines(args.alignments, [hyps[0].pharaoh() if hyps else "" for hyps in results])
    # said once it all worked (an error stays the one line on stderr)
    print(f"attnmt: search precision {precision}{_precision_reason(options, precision)}", file=sys.stderr)
    return 0


def _precision_reason(options: SearchOptions, precision: str) -> str:
    if options.precision != "auto":
        return f" (--{options.precision})"
    if precision == "bf16":
        return " (the default on this CPU's bfloat16 units; --float32 for float32)"
    return ""


def _ctranslate2(args: argparse.Namespace, options: SearchOptions) -> int:
    """--engine ctranslate2: the exported directory's tokenizers and CTranslate2's search, laid
    out for the machine (export/ct2_translate.py), --prefix and --nbest by CTranslate2's own
    target_prefix and num_hypotheses."""
    from attnmt.data.corpus import check_output, read_lines, read_stream, write_lines
    from attnmt.decode.guides import read_prefixes
    from attnmt.eval.nbest import format_entry
    from attnmt.export.ct2_translate import engine_device, layout, translate

    unused = {"--alignments": args.alignments, "--int8": args.int8,
              "--bf16": args.bf16, "--float32": args.float32, "--replace-unk": args.replace_unk,
              "--ngram": args.ngram, "--alpha": args.alpha is not None, "--stop": args.stop is not None,
              "--workers (CTranslate2's replicas: --inter-threads)": args.workers is not None,
              "--checkpoint": args.checkpoint != "best", "--raw-weights": args.raw_weights,
              "--ensemble-mode": args.ensemble_mode != "logprob", "a second --model": len(args.model) > 1,
              "--constraints": args.constraints, "--sample": args.sample}
    named = [flag for flag, given in unused.items() if given]
    if named:
        precision = any(flag in named for flag in ("--int8", "--bf16", "--float32"))
        raise UserError(f"--engine ctranslate2 does not take {', '.join(named)}: attnmt's own search only"
                        + (" (quantize at export: attnmt export --quantization)" if precision else ""))
    device = args.device
    parts = layout(engine_device(device), inter_threads=args.inter_threads,
                   intra_threads=args.intra_threads, max_batch_size=args.batch_size)
    if args.output:
        check_output(args.output, [args.input, args.model[0], args.prefix], "--output")
    name = args.input or "<stdin>"
    lines = read_lines(args.input) if args.input else read_stream(sys.stdin.buffer, name)
    if not lines:
        print(f"attnmt: warning: {name} is empty: nothing to translate", file=sys.stderr)
    prefixes = read_prefixes(args.prefix, len(lines)) if args.prefix else None
    results = translate(args.model[0], lines, beam=options.beam, nbest=options.nbest,
                        length_penalty=options.length_penalty, max_len_ratio=options.max_len_ratio,
                        max_len_cap=options.max_len_cap, device=device, prefixes=prefixes, parts=parts)
    if options.nbest > 1:  # as attnmt's engine writes them: LINE 1-based
        out = [format_entry(i + 1, h.text, h.score) for i, hyps in enumerate(results) for h in hyps]
    else:
        out = [hyps[0].text if hyps else "" for hyps in results]
    if args.output:
        write_lines(args.output, out)
    else:
        sys.stdout.write("".join(x + "\n" for x in out))
        sys.stdout.flush()
    print(f"attnmt: CTranslate2 on {engine_device(device)}: {parts.describe()}", file=sys.stderr)
    return 0
