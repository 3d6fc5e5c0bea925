"""``attnmt experiment luong``: the progressive rows of Luong et al. (2015), Table 1, on any corpus.

Rows (each adds one thing to the row above, as in the paper):

    base                     stacked LSTM, no attention, no dropout, source in order
    + reverse                source reversed
    + dropout                dropout 0.2
    + global (location)      global attention, location score a_t = softmax(W_a h_t)
    + feed input             input feeding (h̃_{t-1} joins the decoder input)
    local-p (general) + feed local-p attention, general score (replaces global location)
    + unk replace            the same model; output <unk> replaced via attention (and --dict)
    ensemble (+ unk replace) every attentional model above, log-probabilities averaged

Every trained row gets the same budget (``--steps`` updates; 0 = the config's epochs) and size.
All rows use a word-level vocabulary (``--vocab`` most frequent words per side, the rest <unk>),
as the paper does: with sub-words there would be no <unk> to replace and the unk row would be
meaningless. Each row reports test perplexity (teacher forcing) and test BLEU (beam search),
sacrebleu's detokenised BLEU and the paper-style tokenised BLEU.

Everything lands in OUT: configs/<row>.yaml, runs/<row>/ (training runs; a finished row is not
retrained and a killed one resumes), hyp/<row>.txt, results/<row>.json, table.md (Table 1),
curves.png (Figure 5), lengths/ (Figure 6: base vs. the best single model vs. the ensemble).
Reuse is checked: a run trained with other settings (budget, size, vocabulary, corpus) is an error,
not a silent row of another experiment, and a cached result of other evaluation settings (test
set, --test-lines, beam, dictionary) is recomputed. A bad --dict, an out-of-range number or a --set
that makes a row's config invalid fails before anything is written.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from attnmt.config import Config, apply_overrides, save_config
from attnmt.data.corpus import output_group, read_lines, read_parallel, write_lines
from attnmt.errors import UserError
from attnmt.jsonio import dumps, finite


@dataclass
class Row:
    name: str
    label: str
    overrides: list[str] = field(default_factory=list)  # cumulative, relative to the base row
    train: bool = True
    unk: bool = False
    ensemble: bool = False
    model_of: str = ""  # rows that reuse another row's model


ROWS = [
    Row("base", "Base", ["model.attention=none", "model.input_feed=false", "model.dropout=0.0",
                         "data.reverse_source=false"]),
    Row("reverse", "+ reverse", ["data.reverse_source=true"]),
    Row("dropout", "+ dropout", ["model.dropout=0.2"]),
    Row("global-location", "+ global attention (location)", ["model.attention=global", "model.score=location"]),
    Row("feed", "+ feed input", ["model.input_feed=true"]),
    Row("local-p", "+ local-p attention (general) + feed input", ["model.attention=local-p", "model.score=general"]),
    Row("unk", "+ unk replace", train=False, unk=True, model_of="local-p"),
    Row("ensemble", "Ensemble of the attentional models + unk replace", train=False, unk=True, ensemble=True),
]
ROW_NAMES = [r.name for r in ROWS]


@dataclass
class Settings:
    train: str
    dev: str
    test: str
    src: str
    tgt: str
    out: Path
    steps: int = 1000
    layers: int = 2
    hidden: int = 256
    vocab: int = 10000
    batch_size: int = 64
    beam: int = 5
    threads: int = 1
    test_lines: int = 0  # 0 = all
    dictionary: str | None = None
    rows: list[str] = field(default_factory=lambda: list(ROW_NAMES))
    extra: list[str] = field(default_factory=list)  # --set overrides applied to every row


def check_settings(s: Settings) -> None:
    """The numeric flags are in range; a bad one would fail in the first row's generated config
    (named by its line in OUT/configs/) after OUT was written, or run with a meaning nobody asked
    for (--beam 0, --test-lines -1 dropping the last test line)."""
    for flag, value, least in (("--steps", s.steps, 0), ("--layers", s.layers, 1), ("--hidden", s.hidden, 1),
                               ("--vocab", s.vocab, 1), ("--batch-size", s.batch_size, 1), ("--beam", s.beam, 1),
                               ("--threads", s.threads, 0), ("--test-lines", s.test_lines, 0)):
        if value < least:
            raise UserError(f"{flag} must be at least {least}, got {value}")


def row_config(s: Settings, row: Row) -> Config:
    """The full config of a trained row: the shared settings, then every row's overrides up to it."""
    base = [
        f"data.train={s.train}", f"data.dev={s.dev}", f"data.src={s.src}", f"data.tgt={s.tgt}",
        "data.tokenizer=word", f"data.src_vocab_size={s.vocab}", f"data.tgt_vocab_size={s.vocab}",
        "model.type=lstm", f"model.layers={s.layers}", f"model.hidden={s.hidden}", f"model.embed={s.hidden}",
        "train.optimizer=adam", "train.lr=0.002", "train.warmup=200", f"train.batch_size={s.batch_size}",
        f"train.threads={s.threads}", f"train.max_steps={s.steps}",
        f"train.valid_every={max(s.steps // 5, 50) if s.steps else 0}",
    ]
    overrides = list(base)
    for r in ROWS:
        overrides += r.overrides
        if r.name == row.name:
            break
    return apply_overrides(Config(), overrides + s.extra)


# what a reused (finished or resumed) run must share with this invocation's row config
_REUSE_KEYS = (
    "data.train", "data.dev", "data.src", "data.tgt", "data.tokenizer", "data.src_vocab_size",
    "data.tgt_vocab_size", "data.reverse_source", "data.max_len", "data.lowercase", "model.type",
    "model.layers", "model.hidden", "model.embed", "model.attention", "model.score",
    "model.input_feed", "model.dropout", "train.optimizer", "train.lr", "train.batch_size",
    "train.max_steps",
)


def _setting(cfg: Config, key: str):
    section, name = key.split(".")
    value = getattr(getattr(cfg, section), name, None)  # None: the other model family's key
    return str(Path(value).absolute()) if key in ("data.train", "data.dev") and value else value


def check_reuse(run: Path, wanted: Config) -> None:
    """Refuse to reuse (or resume) a run whose saved config differs from this row's settings:
    the table would otherwise silently mix budgets, sizes or corpora."""
    saved = run / "config.yaml"
    if not saved.exists():
        return
    from attnmt.config import load_config

    have = load_config(saved)
    diff = [f"{k}={_setting(have, k)!r} (this run: {_setting(wanted, k)!r})"
            for k in _REUSE_KEYS if _setting(have, k) != _setting(wanted, k)]
    if diff:
        raise UserError("trained with other settings: " + "; ".join(diff)
                        + " -- use a new --out, or delete this run to retrain it", str(saved))


def _finished(run: Path) -> bool:
    log = run / "log.jsonl"
    return log.exists() and any('"event": "end"' in line for line in log.read_text(encoding="utf-8").splitlines())


def train_row(s: Settings, row: Row) -> Path:
    from attnmt.train.run import run_training

    run = s.out / "runs" / row.name
    cfg = row_config(s, row)
    resume = (run / "checkpoints" / "LAST").exists()
    if resume or _finished(run):
        check_reuse(run, cfg)  # a resumed run keeps its saved config (train.run.run_training)
    if _finished(run):
        return run
    cfg_path = s.out / "configs" / f"{row.name}.yaml"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    save_config(cfg, cfg_path)
    _note(f"training {row.name} ({'resuming' if resume else 'new'}) -> {run}")
    run_training(str(cfg_path), str(run), [], resume)
    return run


def _note(msg: str) -> None:
    print(f"attnmt: experiment: {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


_DECODED: dict[tuple, list] = {}  # (models, beam, test) -> translations: the unk row reuses its model's


def evaluate_row(s: Settings, row: Row, runs: list[Path], src: list[str], ref: list[str]) -> dict:
    """Translate the test set with the row's model(s), then BLEU and (single models) perplexity.
    Rows with unk replacement also report the BLEU before replacement, of copying only (no
    dictionary) and with the paper's attention timing (attnmt.decode.force)."""
    from attnmt.eval.perplexity import perplexity_report
    from attnmt.decode.ensemble import load_translator
    from attnmt.decode.unk_replace import load_dictionary, replace_unks, target_rank
    from attnmt.eval.scoring import bleu_lang, score_all

    lang = bleu_lang(s.tgt)  # --tgt is a file suffix: 'tgt' (attnmt data synthetic) is no language
    translator = load_translator([str(r) for r in runs], "best", "auto")
    start = time.time()
    key = (tuple(str(r) for r in runs), s.beam, tuple(src))
    if key not in _DECODED:
        _DECODED.clear()
        _DECODED[key] = translator.translate(src, beam=s.beam, batch_size=32, at_cap="keep")
    results = _DECODED[key]
    result: dict = {"row": row.name, "label": row.label, "models": [str(r) for r in runs],
                    "settings": eval_settings(s)}

    def first(res):
        return [h[0].text if h else "" for h in res]  # a blank line has no hypotheses

    if row.unk:
        result["bleu_before_replace"] = score_all(first(results), ref, lang)["bleu"]
        members = translator.runs
        if s.dictionary:
            copied, _ = replace_unks(members, src, results, None)
            result["bleu_copy_only"] = score_all(first(copied), ref, lang)["bleu"]
        dictionary = load_dictionary(s.dictionary, target_rank(members[0].tgt_tok)) if s.dictionary else None
        paper, _ = replace_unks(members, src, results, dictionary, timing="paper")
        result["bleu_paper_timing"] = score_all(first(paper), ref, lang)["bleu"]
        results, stats = replace_unks(members, src, results, dictionary)
        result.update(unk_replaced=stats.unks, unk_from_dictionary=stats.from_dictionary)
    hyps = first(results)
    result["translate_s"] = round(time.time() - start, 1)
    result["unk_in_output"] = sum(h.count("<unk>") for h in hyps)
    (s.out / "hyp").mkdir(exist_ok=True)
    write_lines(s.out / "hyp" / f"{row.name}.txt", hyps)
    result.update(score_all(hyps, ref, lang))
    if len(runs) == 1:
        report = perplexity_report(str(runs[0]), str(s.out / f"test.{s.tgt}"), batch_tokens=4000,
                                   source=str(s.out / f"test.{s.src}"))
        result["ppl"] = round(report["results"][0]["ppl"], 3)
    return result


def eval_settings(s: Settings) -> dict:
    """What a cached results/<row>.json depends on besides the trained models."""
    from attnmt.eval.scoring import bleu_lang

    settings = {"test": str(Path(s.test).absolute()), "test_lines": s.test_lines, "beam": s.beam,
                "dictionary": str(Path(s.dictionary).absolute()) if s.dictionary else None,
                "src": s.src, "tgt": s.tgt}
    if bleu_lang(s.tgt) != s.tgt:  # results cached when --tgt was taken as the language are stale;
        settings["bleu_lang"] = bleu_lang(s.tgt)  # those of a real language code stay valid
    return settings


def read_result(path: Path) -> dict | None:
    """A cached results/<row>.json, or None when there is none usable (then the row is evaluated
    again: the cache is derived data). Files written before the cache became strict JSON may hold
    the bare words NaN/Infinity; they are read, and those numbers become None as in new files."""
    if not path.exists():
        return None
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        _note(f"{path} is not a readable result ({e}): evaluating again")
        return None
    if not isinstance(old, dict):
        _note(f"{path} is not a result object: evaluating again")
        return None
    return finite(old)


def _fmt(value, spec: str) -> str:
    # None is a non-finite number (an overflowing perplexity), stored as null: say so, don't crash
    return "n/a" if value is None else format(value, spec)


def paired_p_values(out: Path, results: list[dict], ref: list[str]) -> None:
    """Each row's ``p_delta``: sacrebleu's paired bootstrap p-value (BLEU, 1000 resamples, seed
    12345) of its difference from the row above, from the hyp/<row>.txt files (where both exist)."""
    from attnmt.eval.significance import paired_test

    for prev, r in zip(results, results[1:]):
        files = [out / "hyp" / f"{x['row']}.txt" for x in (prev, r)]
        if "row" in prev and "row" in r and all(f.exists() for f in files):
            a, b = (read_lines(f) for f in files)
            if len(a) == len(b) == len(ref):
                r["p_delta"] = paired_test([(prev["row"], a), (r["row"], b)], ref, "bs")["systems"][1]["bleu"]["p_value"]


def write_table(results: list[dict], path: Path) -> str:
    """Table 1: Δ is the BLEU difference from the row above, p (Δ) its paired bootstrap p-value."""
    lines = ["| System | Ppl | BLEU | Δ | BLEU (tok) | chrF | p (Δ) |", "|---|---|---|---|---|---|---|"]
    prev = None
    for r in results:
        delta = _fmt(r["bleu"] - prev, "+.1f") if prev is not None and r["bleu"] is not None else ""
        ppl = _fmt(r["ppl"], ".2f") if "ppl" in r else "–"
        p = _fmt(r["p_delta"], ".3f") if r.get("p_delta") is not None else ""
        lines.append(f"| {r['label']} | {ppl} | {_fmt(r['bleu'], '.2f')} | {delta} | "
                     f"{_fmt(r['bleu_tok'], '.2f')} | {_fmt(r['chrf'], '.1f')} | {p} |")
        prev = r["bleu"]
    write_lines(path, lines)  # atomically: a failed run leaves the previous table.md whole
    return "\n".join(lines) + "\n"


def run_luong(s: Settings) -> str:
    unknown = [r for r in s.rows if r not in ROW_NAMES]
    if unknown:
        raise UserError(f"unknown rows {', '.join(unknown)} (known: {', '.join(ROW_NAMES)})")
    check_settings(s)  # fail early (before writing anything) on a bad number,
    if s.threads > 0:
        torch.set_num_threads(s.threads)
    from attnmt.config import Config, apply_overrides, validate

    apply_overrides(Config(), list(s.extra))  # a bad --set,
    for row in ROWS:  # a --set that makes a row's config invalid,
        if row.train and row.name in s.rows:
            validate(row_config(s, row))
    read_parallel(s.train, s.src, s.tgt)  # a bad corpus
    read_parallel(s.dev, s.src, s.tgt)
    if s.dictionary:
        from attnmt.decode.unk_replace import load_dictionary

        load_dictionary(s.dictionary)  # and on a bad --dict, not after hours of training
    src, ref, _ = read_parallel(s.test, s.src, s.tgt)
    if s.test_lines:
        src, ref = src[: s.test_lines], ref[: s.test_lines]
    s.out.mkdir(parents=True, exist_ok=True)
    write_lines(s.out / f"test.{s.src}", src)
    write_lines(s.out / f"test.{s.tgt}", ref)
    chosen = [r for r in ROWS if r.name in s.rows]
    runs: dict[str, Path] = {}
    for row in chosen:
        if row.train:
            runs[row.name] = train_row(s, row)
    results = []
    for row in chosen:
        if row.ensemble:
            candidates = [s.out / "runs" / n for n in ("global-location", "feed", "local-p")]
            models = [m for m in candidates if _finished(m)]
        else:
            models = [runs.get(row.model_of or row.name) or s.out / "runs" / (row.model_of or row.name)]
        if not models or not all(_finished(m) for m in models):
            raise UserError(f"row {row.name} needs trained models: run its rows too", str(s.out))
        for m in models:
            if m.name not in runs:  # trained by an earlier invocation: same settings?
                check_reuse(m, row_config(s, next(r for r in ROWS if r.name == m.name)))
        cached = s.out / "results" / f"{row.name}.json"
        old = read_result(cached)
        if old is not None:
            if old.get("settings") == eval_settings(s) and old.get("models") == [str(m) for m in models]:
                results.append(old)
                continue
            _note(f"{cached} was made with other evaluation settings or models: evaluating again")
        _note(f"evaluating {row.name}")
        result = finite(evaluate_row(s, row, models, src, ref))
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_lines(cached, [dumps(result, indent=1)])
        results.append(result)
    paired_p_values(s.out, results, ref)
    table = write_table(results, s.out / "table.md")
    _figures(s, chosen, runs, results, src, ref)
    return table


def _figures(s: Settings, chosen: list[Row], runs: dict[str, Path], results: list[dict],
             src: list[str], ref: list[str]) -> None:
    from attnmt.eval.lengths import bleu_by_length
    from attnmt.eval.lengths import write_table as write_length_table
    from attnmt.eval.plots import plot_curves, plot_lengths

    trained = {r.label: runs[r.name] for r in chosen if r.name in runs}
    if trained:
        plot_curves(trained, s.out / "curves.png", s.out / "curves.csv")
    by_name = {r["row"]: r for r in results}
    singles = [r for r in results if "ppl" in r]
    systems = {}
    if "base" in by_name:
        systems["base"] = by_name["base"]
    if singles:
        best = max(singles, key=lambda r: r["bleu"])
        systems[f"best single ({best['row']})"] = best
    for name in ("unk", "ensemble"):
        if name in by_name:
            systems[name] = by_name[name]
    if systems:
        hyps = {label: read_lines(s.out / "hyp" / f"{r['row']}.txt") for label, r in systems.items()}
        rows = bleu_by_length(src, ref, hyps)
        (s.out / "lengths").mkdir(exist_ok=True)
        with output_group():  # lengths.csv, .md, .png: all three or none new
            write_length_table(rows, s.out / "lengths" / "lengths.csv",
                               s.out / "lengths" / "lengths.md")
            plot_lengths(rows, list(hyps), s.out / "lengths" / "lengths.png")
