"""Issue 15: the seed reruns behind every ordering docs/RESULTS.md states (one training at a time).

    python experiments/replication.py luong  [--seed N] [--only NAME ...]   Table-1 and local rows, Bible
    python experiments/replication.py luong  --steps 4000 --only NAME ...    the same rows, a longer budget
    python experiments/replication.py aer    [--seed N] [--only NAME ...]   alignment rows, synthetic gold
    python experiments/replication.py ngram-data                           the 5-domain LM split
    python experiments/replication.py ngram  [--seed N] [--only NAME ...]   NgramRes, multi-domain LM
    python experiments/replication.py report                               means, per-seed values, paired Δ
    python experiments/replication.py rebest --group G [--only NAME ...]   BEST again from every checkpoint
    python experiments/replication.py diagonal [--seed N] [--only NAME ...] how diagonal the Luong rows attend

The window rows (Transformer, relative, localness, window and paper-window variants) and the
classification tasks (agreement-hard included) run through experiments/window_attention.py;
experiments/replication_plan.sh lists every call in order. Each run goes to
exp/replication/<group>/<name>[-seedN]/ and is skipped when its result.json exists, so the queue
can be stopped and restarted. ``report`` prints, per row, the mean over seeds, each seed's value
and the mean of the per-seed differences to the group's baseline *of the same seed*, and says
whether those differences agree in sign: only then does RESULTS.md state an ordering. BLEU tables
also give each seed's paired bootstrap p-value of its difference (sacrebleu, on the test.hyp files).

Data: ``attnmt data bible --out data/bible``, ``attnmt data synthetic --out data/synthetic``,
``attnmt data domains --out data/domains`` (paths relative to the repository root).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXP = ROOT / "exp" / "replication"
BIBLE = "data/bible"
SYNTH = "data/synthetic"
DOMAINS = ROOT / "data" / "domains"
DOMAIN_NAMES = ("bible", "commentary", "licenses", "man", "pydoc")
# one training at a time on the 2-core machine, each on both cores
THREADS = 2
ENV = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS)}
ATTNMT = [sys.executable, "-m", "attnmt"]

# (name, config, --set overrides); the first row of a group is the baseline of its paired Δ
LUONG = [  # Bible en→es, 2×256, BPE 8k, 1,000 updates (docs/RESULTS.md, issue 2 and 3 rows)
    ("base", "configs/base.yaml", []),
    ("global-location-feed", "configs/global-location-feed.yaml", []),
    ("global-dot-feed", "configs/global-dot-feed.yaml", []),
    ("local-p-general-feed", "configs/local-p-general-feed.yaml", []),
    ("local-m-general-feed", "configs/local-m-general-feed.yaml", []),  # source in order
    # the control: local-m's score and source order with global attention, so local-m vs this
    # row changes one thing (the window)
    ("global-general-feed-inorder", "configs/global-dot-feed.yaml", ["model.score=general", "data.reverse_source=false"]),
    # local-p with the source in order: against the same control, whether reversing is what keeps
    # its position predictor off the diagonal at this budget (not a row of the paper)
    ("local-p-general-feed-inorder", "configs/local-p-general-feed.yaml", ["data.reverse_source=false"]),
]
LUONG_STEPS = 1000
# the recipe the race against OpenNMT-py settled on (docs/results/race.md): Adam 0.003, 200 warm-up
# updates, inverse square-root decay, label smoothing 0.1; the configs' own values are Adam 0.002
RACE_RECIPE = ["train.lr=0.003", "train.label_smoothing=0.1"]
LUONG_DATA = [f"data.train={BIBLE}/train", f"data.dev={BIBLE}/dev", "train.valid_every=200",
              f"train.threads={THREADS}", *RACE_RECIPE]

AER = [  # synthetic gold alignments, word vocabularies, 800 updates (docs/results/analysis.md)
    ("global-general-feed-inorder", "configs/global-dot-feed.yaml", ["model.score=general", "data.reverse_source=false"]),
    ("global-general-feed", "configs/global-dot-feed.yaml", ["model.score=general"]),
    ("global-location-feed", "configs/global-location-feed.yaml", []),
    ("local-m-general-feed", "configs/local-m-general-feed.yaml", []),
    ("local-p-general-feed", "configs/local-p-general-feed.yaml", []),
]
AER_STEPS = 800
AER_DATA = [f"data.train={SYNTH}/train", f"data.dev={SYNTH}/dev", "data.src=src", "data.tgt=tgt",
            "data.tokenizer=word", "data.src_vocab_size=10000", "data.tgt_vocab_size=10000",
            "train.valid_every=200", f"train.threads={THREADS}", *RACE_RECIPE]

NGRAM_STEPS = 300  # docs/results/ngramres.md section 3
# NgramRes rows: the plain LSTM LM on the mix; the paper's set-up (one model on the mix, each
# sentence trained with its own domain's 5-gram: ngram.domains, the domain's 5-gram at test);
# NgramRes trained with the mixed 5-gram and the domain's 5-gram swapped in at test (this
# project's earlier variant, kept and labelled); per-domain NgramRes models, each trained on its
# domain's text with that domain's 5-gram.
NGRAM = ["plain", "ngramres-domains", "ngramres-mixed", *[f"ngramres-own-{d}" for d in DOMAIN_NAMES]]


def sh(cmd: list[str], log: Path | None = None) -> str:
    print("+", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, check=True, env=ENV, cwd=ROOT, capture_output=True, text=True)
    if log is not None:
        with open(log, "a", encoding="utf-8") as f:
            f.write(out.stdout + out.stderr)
    return out.stdout


def luong_group(steps: int) -> str:
    """The Luong rows' group: ``luong`` at the 1,000 updates of RESULTS.md's table, else
    ``luong-<steps>`` (a longer budget's runs beside them, never mixed into their means)."""
    return "luong" if steps == LUONG_STEPS else f"luong-{steps}"


def run_dir(group: str, name: str, seed: int) -> Path:
    return EXP / group / (name if seed == 1 else f"{name}-seed{seed}")


def last_step(run: Path) -> int:
    """The step of the run's LAST checkpoint (0: none)."""
    last = run / "checkpoints" / "LAST"
    return int(last.read_text(encoding="utf-8").strip().rsplit("-", 1)[1]) if last.exists() else 0


def train(run: Path, config: str, steps: int, overrides: list[str], seed: int) -> None:
    """Train to ``steps`` updates, resuming an interrupted run (a finished one is left as it is)."""
    if last_step(run) >= steps:
        return
    if (run / "checkpoints" / "LAST").exists():
        cmd = [*ATTNMT, "train", "--out", str(run), "--resume", "--max-steps", str(steps)]
    else:
        cmd = [*ATTNMT, "train", config, "--out", str(run), "--max-steps", str(steps)]
        for o in [*overrides, f"train.seed={seed}"]:
            cmd += ["--set", o]
    run.mkdir(parents=True, exist_ok=True)
    sh(cmd, run / "train.out")


def luong(args) -> None:
    for name, config, overrides in LUONG:
        run = run_dir(luong_group(args.steps), name, args.seed)
        if (args.only and name not in args.only) or (run / "result.json").exists():
            continue
        train(run, config, args.steps, LUONG_DATA + overrides, args.seed)
        hyp = run / "test.hyp"
        sh([*ATTNMT, "translate", "--model", str(run), "-i", f"{BIBLE}/test.en", "-o", str(hyp), "--beam", "5",
            "--batch-size", "64"])
        result = {"name": name, "seed": args.seed, "config": config, "overrides": overrides}
        result.update(json.loads(sh([*ATTNMT, "score", "--hyp", str(hyp), "--ref", f"{BIBLE}/test.es", "--lang", "es",
                                     "--json"])))
        result.update(json.loads(sh([*ATTNMT, "score", "--model", str(run), "--src", f"{BIBLE}/test.en", "--ref",
                                     f"{BIBLE}/test.es", "--json"])))
        (run / "result.json").write_text(json.dumps(result, indent=1))


def aer(args) -> None:
    for name, config, overrides in AER:
        run = run_dir("aer", name, args.seed)
        if (args.only and name not in args.only) or (run / "result.json").exists():
            continue
        train(run, config, AER_STEPS, AER_DATA + overrides, args.seed)
        result = {"name": name, "seed": args.seed, "config": config, "overrides": overrides}
        cmd = [*ATTNMT, "align", "--model", str(run), "--src", f"{SYNTH}/test.src", "--tgt", f"{SYNTH}/test.tgt",
               "-o", str(run / "test.align"), "--gold", f"{SYNTH}/test.align"]
        err = subprocess.run(cmd, check=True, env=ENV, cwd=ROOT, capture_output=True, text=True).stderr
        result.update(json.loads(err.split("attnmt: align ", 1)[1].splitlines()[0]))
        hyp = run / "test.hyp"
        sh([*ATTNMT, "translate", "--model", str(run), "-i", f"{SYNTH}/test.src", "-o", str(hyp), "--beam", "5"])
        result.update(json.loads(sh([*ATTNMT, "score", "--hyp", str(hyp), "--ref", f"{SYNTH}/test.tgt", "--json"])))
        (run / "result.json").write_text(json.dumps(result, indent=1))


def rebest(args) -> None:
    """Pick BEST again for the runs of ``args.group`` (all, or ``--only`` names): the step
    checkpoint with the lowest dev perplexity, each computed in a fresh process; a run whose BEST
    changes loses its result.json, so the next pass of its group evaluates it again. For runs
    trained before 3fc1b79 with global dot/general attention and input feeding, whose in-training
    validation read stale decoder weights and marked a wrong BEST (docs/RESULTS.md, issue 15)."""
    src, tgt = {"luong": (f"{BIBLE}/dev.en", f"{BIBLE}/dev.es"), "aer": (f"{SYNTH}/dev.src", f"{SYNTH}/dev.tgt")}[args.group]
    for run in sorted(p for p in (EXP / args.group).iterdir() if (p / "checkpoints").is_dir()):
        if args.only and run.name not in args.only:
            continue
        ppl = {}
        for step in sorted((run / "checkpoints").glob("step-*")):
            out = sh([*ATTNMT, "eval", "--model", str(run), "--checkpoint", step.name, "--input", tgt, "--src", src,
                      "--json"])
            ppl[step.name] = json.loads(out)["results"][0]["ppl"]
        best_file = run / "checkpoints" / "BEST"
        old, new = best_file.read_text(encoding="utf-8").strip(), min(ppl, key=ppl.get)
        print(f"{run.name}: dev ppl {', '.join(f'{k[-5:]} {v:.1f}' for k, v in ppl.items())}; BEST {old} -> {new}",
              flush=True)
        (run / "dev_ppl.json").write_text(json.dumps(ppl, indent=1))
        if new != old:
            best_file.write_text(new + "\n", encoding="utf-8")
            (run / "result.json").unlink(missing_ok=True)


def ngram_data(args) -> None:
    """The split of docs/results/ngramres.md section 3: every 4th line of each domain's
    train.txt (at most 6,000), shuffled together; 300 dev lines and the first 500 test lines per
    domain. The shuffle (seed 1) is this script's; the original order was not recorded."""
    out = EXP / "domains"
    out.mkdir(parents=True, exist_ok=True)
    mixed, mixed_dev = [], []
    for d in DOMAIN_NAMES:
        read = lambda split: [x for x in (DOMAINS / d / f"{split}.txt").read_text(encoding="utf-8").splitlines() if x.strip()]
        train_lines, dev, test = read("train")[::4][:6000], read("dev")[:300], read("test")[:500]
        for split, lines in (("train", train_lines), ("dev", dev), ("test", test)):
            (out / f"{d}.{split}.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
        mixed += train_lines
        mixed_dev += dev
    random.Random(1).shuffle(mixed)
    (out / "mixed.txt").write_text("".join(x + "\n" for x in mixed), encoding="utf-8")
    (out / "mixed.dev.txt").write_text("".join(x + "\n" for x in mixed_dev), encoding="utf-8")
    print(f"{len(mixed)} training lines in {out}")


def _eval(run: Path, test: Path, extra: list[str]) -> dict:
    row = json.loads(sh([*ATTNMT, "eval", "--model", str(run), "--input", str(test), *extra, "--json"]))["results"]
    return {r["setting"]: {"word_ppl": r["word_ppl"], "ppl": r["ppl"]} for r in row}


def ngram(args) -> None:
    data = EXP / "domains"
    for name in NGRAM:
        run = run_dir("ngram", name, args.seed)
        if (args.only and name not in args.only) or (run / "result.json").exists():
            continue
        own = name.removeprefix("ngramres-own-") if name.startswith("ngramres-own-") else None
        train_file = data / (f"{own}.train.txt" if own else "mixed.txt")
        dev_file = data / (f"{own}.dev.txt" if own else "mixed.dev.txt")
        overrides = [f"data.train={train_file}", f"data.dev={dev_file}"]
        if name == "ngramres-domains":  # RUN/ngram.train.<domain>.bin, one per domain
            overrides = [f"data.train={data}/{{domain}}.train.txt", f"data.dev={data}/{{domain}}.dev.txt",
                         f"ngram.domains={' '.join(DOMAIN_NAMES)}"]
        config = "configs/lm-lstm.yaml" if name == "plain" else "configs/ngramres-lm-lstm.yaml"
        train(run, config, NGRAM_STEPS, [*overrides, f"train.threads={THREADS}"], args.seed)
        result: dict = {"name": name, "seed": args.seed, "domains": {}}
        for d in ([own] if own else DOMAIN_NAMES):
            test = data / f"{d}.test.txt"
            if name == "ngramres-domains":  # the domain's own 5-gram, as trained
                row = _eval(run, test, ["--ngram", str(run / f"ngram.train.{d}.bin"), "--ngram-only"])
            else:
                row = _eval(run, test, [] if name == "plain" else ["--ngram-only"])
            if name == "ngramres-mixed":  # the domain's own 5-gram, in this run's vocabulary, swapped in
                gram = run / f"{d}.5gram.bin"
                if not gram.exists():
                    sh([*ATTNMT, "ngram", "build", "--order", "5", "--input", str(data / f"{d}.train.txt"),
                        "--binary", str(gram), "--vocab-from", str(run)])
                swapped = _eval(run, test, ["--ngram", str(gram), "--ngram-only"])
                row.update({f"{k} (own 5-gram swapped in)": v for k, v in swapped.items()})
            result["domains"][d] = row
        (run / "result.json").write_text(json.dumps(result, indent=1))


def report(args) -> None:
    """Per group and metric: mean, per-seed values, and the paired Δ to the group's first row."""

    def results(group: str) -> dict[str, dict[int, dict]]:
        out: dict[str, dict[int, dict]] = {}
        for path in sorted((EXP / group).glob("*/result.json")):
            r = json.loads(path.read_text())
            r["_hyp"] = path.parent / "test.hyp"  # the row's test translations, for the paired test
            out.setdefault(r["name"], {})[r["seed"]] = r
        return out

    def table(group: str, order: list[str], metric: str, get, ref: str | None = None) -> None:
        compare(group, metric, [(name, name, get) for name in order], ref)

    def paired_p(base: dict, row: dict, ref: str | None) -> str:
        """sacrebleu's paired bootstrap p-value (BLEU, seed 12345) of a row's test.hyp against
        the baseline's of the same seed; "–" without both files or references."""
        from attnmt.eval.significance import paired_test

        if ref is None or not (base["_hyp"].exists() and row["_hyp"].exists()):
            return "–"
        refs = (ROOT / ref).read_text(encoding="utf-8").splitlines()
        hyps = [p.read_text(encoding="utf-8").splitlines() for p in (base["_hyp"], row["_hyp"])]
        if not all(len(h) == len(refs) for h in hyps):
            return "–"
        return f"{paired_test([('base', hyps[0]), ('row', hyps[1])], refs, 'bs')['systems'][1]['bleu']['p_value']:.3f}"

    def compare(group: str, metric: str, rows: list[tuple], ref: str | None = None) -> None:
        """rows: (label, run name, value of a run's result); Δ to the first row, seed by seed;
        with ``ref`` (BLEU tables) also each seed's paired bootstrap p-value of that Δ."""
        runs = results(group)
        rows = [row for row in rows if row[1] in runs]
        if not rows:
            return
        base_label, base, base_get = rows[0]
        print(f"\n{group}: {metric} (Δ: row − {base_label}, same seed)")
        print("| row | seeds | mean | per seed | paired Δ (per seed) | Δ signs agree | paired-bs p (per seed) |")
        print("|---|---|---|---|---|---|---|")
        for label, name, get in rows:
            seeds = sorted(runs[name])
            values = [get(runs[name][s]) for s in seeds]
            diffs = [get(runs[name][s]) - base_get(runs[base][s]) for s in seeds if s in runs[base]]
            first = label == base_label
            delta = (f"{sum(diffs) / len(diffs):+.2f} ({', '.join(f'{x:+.2f}' for x in diffs)})"
                     if diffs and not first else "–")
            agree = ("yes" if len(diffs) >= 3 and (all(x > 0 for x in diffs) or all(x < 0 for x in diffs))
                     else "no" if not first else "–")
            p_values = ", ".join(paired_p(runs[base][s], runs[name][s], ref) for s in seeds
                                 if s in runs[base]) if ref and not first else "–"
            print(f"| {label} | {len(seeds)} | {sum(values) / len(values):.2f} | "
                  f"{', '.join(f'{v:.2f}' for v in values)} | {delta} | {agree} | {p_values} |")

    luong_order = [n for n, _, _ in LUONG]
    table("luong", luong_order, "test BLEU", lambda r: r["bleu"], f"{BIBLE}/test.es")
    table("luong", luong_order, "test word ppl", lambda r: r["word_ppl"])
    table("luong", luong_order, "test ppl per piece", lambda r: r["ppl"])
    local = ["global-general-feed-inorder", "local-m-general-feed", "local-p-general-feed-inorder"]
    table("luong", local, "test BLEU, local-m and local-p vs their in-order global control",
          lambda r: r["bleu"], f"{BIBLE}/test.es")
    for group in sorted(p.name for p in EXP.glob("luong-*")):  # longer budgets
        table(group, luong_order, "test BLEU", lambda r: r["bleu"], f"{BIBLE}/test.es")
    aer_order = [n for n, _, _ in AER]
    table("aer", aer_order, "AER", lambda r: r["aer"])
    table("aer", aer_order, "test BLEU", lambda r: r["bleu"], f"{SYNTH}/test.tgt")
    reversed_pair = ["global-general-feed", "local-p-general-feed"]  # both on reversed sources
    table("aer", reversed_pair, "AER, local-p vs its reversed global control", lambda r: r["aer"])
    for d in DOMAIN_NAMES:  # word-level perplexity; the per-piece one is in each result.json
        def word_ppl(setting: str, d: str = d):
            return lambda r: r["domains"][d][setting]["word_ppl"]

        compare("ngram", f"{d} test: word perplexity", [
            ("NgramRes, each domain's own 5-gram in training and test (paper)", "ngramres-domains",
             word_ppl("ngramres alpha=0.5")),
            ("NgramRes, mixed 5-gram in training, own 5-gram swapped in at test", "ngramres-mixed",
             word_ppl("ngramres alpha=0.5 (own 5-gram swapped in)")),
            ("NgramRes, mixed 5-gram in training and test", "ngramres-mixed", word_ppl("ngramres alpha=0.5")),
            ("NgramRes on this domain's text alone, its 5-gram", f"ngramres-own-{d}", word_ppl("ngramres alpha=0.5")),
            ("the domain's 5-gram alone", "ngramres-domains", word_ppl("ngram")),
            ("LSTM LM on the mix (no n-gram)", "plain", word_ppl("neural")),
        ])

def diagonal(args) -> None:
    """How closely each Luong row's attention follows the diagonal: the first ``--lines`` test
    pairs are force-decoded (attnmt.decode.force, reversal undone, the row that predicts each
    piece); per sentence the correlation between the attention's centre Σ_s s·a_t(s) and the
    target position t, and the mean |centre/S − t/T|; averaged over sentences (T ≥ 3). Bible
    verses are close to monotone, so a model that aligns scores near 1 and near 0. Writes
    RUN/diagonal.json and prints one JSON line per run."""
    import torch

    from attnmt.decode.force import force_attention, output_rows
    from attnmt.runs.loader import load_run

    torch.set_num_threads(THREADS)
    src = (ROOT / BIBLE / "test.en").read_text(encoding="utf-8").splitlines()[: args.lines]
    ref = (ROOT / BIBLE / "test.es").read_text(encoding="utf-8").splitlines()[: args.lines]
    for name, _, _ in LUONG:
        run_path = run_dir(luong_group(args.steps), name, args.seed)
        if name == "base" or (args.only and name not in args.only) or not (run_path / "result.json").exists():
            continue
        run = load_run(run_path, device="cpu")
        tgt_ids = [run.tgt_tok.encode(line) for line in ref]
        corr, offset = [], []
        for rows, ids in zip(force_attention(run, src, tgt_ids), tgt_ids):
            a = output_rows(rows, len(ids), "predicted")  # (T, S)
            T, S = a.shape
            if T < 3 or S < 2:
                continue
            centre = (a * torch.arange(S, dtype=a.dtype)).sum(1) / a.sum(1)
            t = torch.arange(T, dtype=a.dtype)
            r = float(torch.corrcoef(torch.stack([centre, t]))[0, 1])
            if r == r:  # NaN when the centre never moves: no correlation to average
                corr.append(r)
            offset.append(float((centre / (S - 1) - t / (T - 1)).abs().mean()))
        result = {"name": name, "seed": args.seed, "sentences": len(corr),
                  "corr_centre_position": round(sum(corr) / len(corr), 3),
                  "mean_abs_offset": round(sum(offset) / len(offset), 3)}
        (run_path / "diagonal.json").write_text(json.dumps(result, indent=1))
        print(json.dumps(result), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["luong", "aer", "ngram-data", "ngram", "report", "rebest", "diagonal"])
    p.add_argument("--group", choices=["luong", "aer"], default="luong", help="rebest: the group")
    p.add_argument("--only", nargs="*")
    p.add_argument("--seed", type=int, default=1, help="train.seed; runs of seed N > 1 go to NAME-seedN/")
    p.add_argument("--lines", type=int, default=300, help="diagonal: the first N test pairs")
    p.add_argument("--steps", type=int, default=LUONG_STEPS,
                   help="luong, diagonal: the rows' budget in updates (runs of another budget than "
                        f"{LUONG_STEPS} go to exp/replication/luong-<steps>/)")
    args = p.parse_args()
    os.chdir(ROOT)
    {"luong": luong, "aer": aer, "ngram-data": ngram_data, "ngram": ngram, "report": report,
     "rebest": rebest, "diagonal": diagonal}[args.what](args)


if __name__ == "__main__":
    main()
