"""`attnmt rerank`: n-best lists reranked by weighted features, weights tuned on dev BLEU."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import sacrebleu

from attnmt.cli.main import main
from attnmt.eval.nbest import format_entry, read_nbest
from attnmt.eval.rerank import DevBleu, compute_features, parse_features

WORDS = "el la un una gato perro casa mesa ve tiene quiere rojo roja grande viejo".split()


def _write(path, lines) -> str:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(path)


def _case(n: int = 40, seed: int = 0):
    """References, and n-best lists whose search score never ranks the reference first, nor at a
    fixed place, among three corrupted variants (words dropped, swapped or replaced)."""
    rng = random.Random(seed)
    refs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 9))) for _ in range(n)]
    nbest = []
    for i, ref in enumerate(refs):
        words = ref.split()
        dropped = " ".join(words[:-2])
        swapped = " ".join(words[1:2] + words[:1] + words[2:])
        replaced = " ".join(rng.choice(WORDS) if k % 2 else w for k, w in enumerate(words))
        variants = [replaced, dropped, swapped]
        rng.shuffle(variants)
        variants.insert(rng.randint(1, 3), ref)
        for k, text in enumerate(variants):
            nbest.append(format_entry(i + 1, text, -0.5 - 0.1 * k))
    return refs, nbest


def test_a_weight_on_length_picks_the_longest(tmp_path, capsys):
    nbest = [format_entry(1, "a b", -0.1), format_entry(1, "a b c d", -0.9), format_entry(1, "a", -0.05),
             format_entry(3, "x y z", -0.3), format_entry(3, "x", -0.2)]  # line 2: a blank source
    f = _write(tmp_path / "n.txt", nbest)
    (tmp_path / "w.json").write_text(json.dumps({"features": ["score", "length"],
                                                 "weights": {"score": 0, "length": 1}}))
    assert main(["rerank", "--nbest", f, "--weights", str(tmp_path / "w.json")]) == 0
    assert capsys.readouterr().out.splitlines() == ["a b c d", "", "x y z"]
    (tmp_path / "w.json").write_text(json.dumps({"features": ["score", "length"],
                                                 "weights": {"score": 1, "length": 0}}))
    out = tmp_path / "out.txt"
    assert main(["rerank", "--nbest", f, "--weights", str(tmp_path / "w.json"), "-o", str(out)]) == 0
    assert out.read_text().splitlines() == ["a", "", "x"]  # the best search score
    src = _write(tmp_path / "s.txt", ["s0", "", "s2", "s3"])  # --src sets the line count
    assert main(["rerank", "--nbest", f, "--weights", str(tmp_path / "w.json"), "--src", src]) == 0
    assert capsys.readouterr().out.splitlines() == ["a", "", "x", ""]


def test_tuning_finds_the_ngram_weight_that_recovers_the_references(tmp_path, capsys):
    from attnmt.ngram.model import NgramLM

    refs, nbest = _case()
    dev_refs = _write(tmp_path / "dev.ref", refs)
    dev_nbest = _write(tmp_path / "dev.nbest", nbest)
    lm = tmp_path / "lm.ngram"
    NgramLM.estimate_text(dev_refs, order=3).save(lm)  # an LM that knows the references
    weights = tmp_path / "w.json"
    argv = ["rerank", "--tune", "--nbest", dev_nbest, "--ref", dev_refs, "--features", "score", "length",
            f"ngram={lm}", "--weights-out", str(weights)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    tuned = json.loads(weights.read_text())
    assert tuned["features"] == ["score", "length", "ngram=lm.ngram"]  # beside the weights file
    assert tuned["paths"] == "relative to this file"
    assert tuned["weights"]["ngram"] > 0
    assert tuned["dev_bleu"]["reranked"] > tuned["dev_bleu"]["first"] + 20
    assert "(1-best) ->" in err
    out = tmp_path / "out.txt"
    assert main(["rerank", "--nbest", dev_nbest, "--weights", str(weights), "--ref", dev_refs, "-o", str(out)]) == 0
    chosen = out.read_text().splitlines()
    assert sacrebleu.corpus_bleu(chosen, [refs]).score == pytest.approx(tuned["dev_bleu"]["reranked"], abs=0.01)
    first = [g[0].text for g in read_nbest(dev_nbest)]
    assert sacrebleu.corpus_bleu(first, [refs]).score == pytest.approx(tuned["dev_bleu"]["first"], abs=0.01)
    assert main(argv) == 0 and json.loads(weights.read_text()) == tuned  # deterministic


def test_weights_work_from_another_directory(tmp_path, monkeypatch, capsys):
    """Tuned in one folder with paths relative to it, applied from another: the weights file
    names its n-gram relative to itself (issue 58 item 9)."""
    from attnmt.ngram.model import NgramLM

    refs, nbest = _case(20, seed=5)
    for folder in ("work", "models", "out", "elsewhere"):
        (tmp_path / folder).mkdir()
    _write(tmp_path / "work" / "dev.ref", refs)
    _write(tmp_path / "work" / "dev.nbest", nbest)
    NgramLM.estimate_text(tmp_path / "work" / "dev.ref", order=3).save(tmp_path / "models" / "lm.ngram")
    monkeypatch.chdir(tmp_path / "work")
    assert main(["rerank", "--tune", "--nbest", "dev.nbest", "--ref", "dev.ref", "--features", "score",
                 "ngram=../models/lm.ngram", "--weights-out", "../out/w.json", "-o", "tuned.txt"]) == 0
    assert json.loads((tmp_path / "out" / "w.json").read_text())["features"][1] == "ngram=../models/lm.ngram"
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["rerank", "--nbest", "../work/dev.nbest", "--weights", "../out/w.json", "-o", "again.txt"]) == 0
    assert (tmp_path / "elsewhere" / "again.txt").read_text() == (tmp_path / "work" / "tuned.txt").read_text()
    (tmp_path / "deep").mkdir()
    (tmp_path / "out").rename(tmp_path / "deep" / "out")  # the weights file alone moved: its path is wrong
    assert main(["rerank", "--nbest", "../work/dev.nbest", "--weights", "../deep/out/w.json"]) == 2
    assert "lm.ngram" in capsys.readouterr().err


def test_dev_bleu_statistics_equal_sacrebleu_corpus_bleu():
    refs, nbest = _case(25, seed=3)
    groups = [[], *(g for g in _groups(nbest))]  # a first line without hypotheses
    refs = ["la casa", *refs]
    bleu = DevBleu(groups, refs)
    rng = random.Random(1)
    for _ in range(5):
        picks = [-1] + [rng.randrange(len(g)) for g in groups[1:]]
        hyps = [""] + [g[k].text for g, k in zip(groups[1:], picks[1:])]
        assert bleu(picks) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-9)


def _groups(nbest: list[str]):
    out: dict[int, list] = {}
    from attnmt.eval.nbest import Entry

    for k, line in enumerate(nbest):
        i, text, score = line.split(" ||| ")
        out.setdefault(int(i), []).append(Entry(text, float(score), k + 1))
    return [out[i] for i in sorted(out)]


def test_run_features_are_the_per_sentence_scores(tiny_run, tiny_corpus, tmp_path):
    import attnmt

    src = (tiny_corpus.directory / "dev.en").read_text().splitlines()[:6]
    ref = (tiny_corpus.directory / "dev.es").read_text().splitlines()[:6]
    # English hypotheses of Spanish sources: the tiny en->es run is their channel model P(x|y)
    nbest = [format_entry(i + 1, h, -1.0) for i in range(6) for h in (src[i], src[(i + 1) % 6])]
    f = _write(tmp_path / "n.txt", nbest)
    groups = read_nbest(f, 6)
    phi = compute_features(parse_features([f"rev={tiny_run}", f"fwd={tiny_run}"]), groups, ref, device="cpu")
    model = attnmt.load(tiny_run, device="cpu")
    hyps = [e.text for g in groups for e in g]
    srcs = [ref[i] for i in range(6) for _ in range(2)]
    rev = [r["logprob"] for r in model.score(srcs, sources=hyps, per_sentence=True)]
    fwd = [r["logprob"] for r in model.score(hyps, sources=srcs, per_sentence=True)]
    np.testing.assert_allclose(phi[:, 0], rev, rtol=1e-6)
    np.testing.assert_allclose(phi[:, 1], fwd, rtol=1e-6)
    # the right pair (x, y) scores higher than a wrong one under the channel model, on most lines
    assert sum(phi[2 * i, 0] > phi[2 * i + 1, 0] for i in range(6)) >= 4


@pytest.mark.parametrize("line, message", [
    ("1 ||| a b", "expected 3 fields"),
    ("x ||| a b ||| -1.0", "line number must be a number >= 1"),
    ("0 ||| a b ||| -1.0", "LINE is 1-based"),
    ("1 ||| a b ||| nan", "finite number"),
    ("1 ||| a b ||| high", "finite number"),
    ("", "empty line"),
])
def test_malformed_nbest_is_one_line_naming_file_and_line(tmp_path, capsys, line, message):
    f = _write(tmp_path / "n.txt", [format_entry(1, "a", -1.0), line])
    (tmp_path / "w.json").write_text(json.dumps({"features": ["length"], "weights": {"length": 1}}))
    out = tmp_path / "out.txt"
    assert main(["rerank", "--nbest", f, "--weights", str(tmp_path / "w.json"), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{f}:2:" in err[0] and message in err[0]
    assert not out.exists()


def test_counts_order_features_and_weights_are_checked(tmp_path, capsys):
    f = _write(tmp_path / "n.txt", [format_entry(2, "a", -1.0), format_entry(1, "b", -1.0)])
    ref = _write(tmp_path / "r.txt", ["x", "y"])
    w = tmp_path / "w.json"
    w.write_text(json.dumps({"features": ["length"], "weights": {"length": 1}}))

    def error(*argv) -> str:
        assert main(["rerank", *argv]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1
        return lines[0]

    assert f"{f}:2:" in error("--nbest", f, "--weights", str(w)) # indices decrease
    g = _write(tmp_path / "g.txt", [format_entry(1, "a", -1.0), format_entry(3, "b", -1.0)])
    assert "only 2 source lines" in error("--nbest", g, "--weights", str(w), "--ref", ref)
    assert "line counts differ" in error("--nbest", g, "--weights", str(w), "--ref", ref, "--src",
                                         _write(tmp_path / "s.txt", ["x"]))
    assert "unknown feature 'lenght'" in error("--tune", "--nbest", g, "--ref", ref, "--features", "lenght")
    assert "needs a file" in error("--tune", "--nbest", g, "--ref", ref, "--features", "ngram")
    assert "give --src" in error("--tune", "--nbest", g, "--ref", ref, "--features", "rev=runs/x")
    assert "--tune needs --features and --ref" in error("--tune", "--nbest", g, "--features", "length")
    w.write_text(json.dumps({"features": ["length"], "weights": {"length": "big"}}))
    assert "weights.length must be a finite number" in error("--nbest", g, "--weights", str(w))
    w.write_text('{"features": ["length"], ')
    assert f"{w}:1: not JSON" in error("--nbest", g, "--weights", str(w))


def test_translate_nbest_output_is_what_rerank_reads(tiny_run, tiny_corpus, tmp_path):
    src = (tiny_corpus.directory / "dev.en").read_text().splitlines()[:5]
    src[2] = ""  # a blank source line has no entries, and rerank gives it an empty line
    f = _write(tmp_path / "s.en", src)
    nbest = tmp_path / "n.txt"
    assert main(["translate", "--model", str(tiny_run), "-i", f, "-o", str(nbest), "--beam", "3", "--nbest", "3",
                 "--device", "cpu"]) == 0
    groups = read_nbest(nbest, len(src))
    assert [len(g) for g in groups] == [3, 3, 0, 3, 3]
    assert nbest.read_text().startswith("1 ||| ")  # LINE is 1-based, as per-sentence scores' line
    assert all(a.score >= b.score for g in groups for a, b in zip(g[1:], g[2:]))  # then best first
    one = tmp_path / "one.txt"
    assert main(["translate", "--model", str(tiny_run), "-i", f, "-o", str(one), "--beam", "3", "--device", "cpu"]) == 0
    assert [g[0].text if g else "" for g in groups] == one.read_text().splitlines()  # rerank's 1-best
    w = tmp_path / "w.json"
    w.write_text(json.dumps({"features": ["length"], "weights": {"length": 0}}))
    out = tmp_path / "out.txt"
    assert main(["rerank", "--nbest", str(nbest), "--weights", str(w), "--src", f, "-o", str(out)]) == 0
    assert out.read_text() == one.read_text()  # all tied: the first entry, the plain translation
