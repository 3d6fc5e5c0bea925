"""Sentence classification: data reading, the agreement generator, training end to end."""

from __future__ import annotations

import random

import pytest

from attnmt.corpora.agreement import HARD, NOUNS, generate, make_example, write_agreement
from attnmt.data.labels import LabelSet, read_classification
from attnmt.errors import UserError
from attnmt.eval.classify import accuracy_by_group

SINGULAR = {s for s, _ in NOUNS}
PLURAL = {p for _, p in NOUNS}


def _write(path, lines):
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")


def test_reads_tsv_and_two_files(tmp_path):
    _write(tmp_path / "a.tsv", ["one two\tx\t3", "", "three\ty"])
    texts, labels, extras, where, lines = read_classification(str(tmp_path / "a.tsv"), "en", "label")
    assert texts == ["one two", "three"] and labels == ["x", "y"] and extras == [["3"], []]
    assert where == str(tmp_path / "a.tsv") and lines == [1, 3]
    _write(tmp_path / "b.en", ["one two", "three"])
    _write(tmp_path / "b.label", ["x", "y"])
    texts, labels, _, where, lines = read_classification(str(tmp_path / "b"), "en", "label")
    assert texts == ["one two", "three"] and labels == ["x", "y"]
    assert where == str(tmp_path / "b.label") and lines == [1, 2]  # labels are named in their file


def test_classification_input_errors_name_file_and_line(tmp_path):
    _write(tmp_path / "bad.tsv", ["fine\tx", "no label here"])
    with pytest.raises(UserError, match=r"bad\.tsv:2: expected text<TAB>label"):
        read_classification(str(tmp_path / "bad.tsv"), "en", "label")
    _write(tmp_path / "c.en", ["a", "b"])
    _write(tmp_path / "c.label", ["x"])
    with pytest.raises(UserError, match="line counts differ"):
        read_classification(str(tmp_path / "c"), "en", "label")
    with pytest.raises(UserError, match="does not occur"):
        LabelSet.build(["x"]).encode("z")


def _parse(text: str) -> tuple[str, int, int]:
    """Re-derive (label, attractors, intervening) from the words: the subject is the first noun
    after the last comma (a preposed phrase ends with one), the rest intervene."""
    words = text.split()
    start = max((i for i, w in enumerate(words) if w == ","), default=-1) + 1
    nouns = [w for w in words[start:] if w in SINGULAR or w in PLURAL]
    plural = nouns[0] in PLURAL
    attractors = sum((w in PLURAL) != plural for w in nouns[1:])
    return ("pl" if plural else "sg"), attractors, len(nouns) - 1


def test_agreement_examples_are_labelled_by_the_subject():
    rng = random.Random(0)
    for _ in range(300):
        modifiers = rng.randint(0, 4)
        ex = make_example(rng, modifiers, rng.randint(0, modifiers))
        assert _parse(ex.text) == (ex.label, ex.attractors, ex.intervening), ex


def test_agreement_splits_are_balanced_disjoint_and_reproducible(tmp_path):
    splits = generate(n_train=300, n_test_per_bucket=20, max_modifiers=3, seed=5)
    assert [sum(e.attractors == k for e in splits["test"]) for k in range(4)] == [20] * 4
    assert not {e.text for e in splits["test"]} & {e.text for e in splits["train"]}
    assert {e.label for e in splits["train"]} == {"sg", "pl"}
    # the nearest noun misleads on every example with an attractor right before the verb
    last_noun_right = [e for e in splits["test"] if e.attractors == 0]
    assert all(_parse(e.text)[0] == e.label for e in last_noun_right)
    counts = write_agreement(tmp_path, n_train=300, n_test_per_bucket=20, max_modifiers=3, seed=5)
    first = (tmp_path / "test.tsv").read_text()
    write_agreement(tmp_path, n_train=300, n_test_per_bucket=20, max_modifiers=3, seed=5)
    assert (tmp_path / "test.tsv").read_text() == first and counts["test"] == 80


def test_agreement_defaults_are_unchanged_by_the_harder_options():
    """The data behind the reported rows: the same bytes as before the knobs existed."""
    import hashlib

    s = generate(n_train=300, n_test_per_bucket=20, max_modifiers=3, seed=5)
    text = "".join(e.tsv() + "\n" for k in ("train", "dev", "test") for e in s[k])
    assert hashlib.sha256(text.encode()).hexdigest()[:16] == "aeb675c0afb6a5ef"


def test_hard_agreement_is_longer_and_tests_beyond_training():
    rng = random.Random(1)
    for _ in range(200):  # filler words keep the labels right
        modifiers = rng.randint(0, 8)
        ex = make_example(rng, modifiers, rng.randint(0, modifiers), filler=3)
        assert _parse(ex.text) == (ex.label, ex.attractors, ex.intervening), ex
    easy = generate(n_train=400, n_test_per_bucket=10, seed=2)
    hard = generate(n_train=400, n_test_per_bucket=10, seed=2, max_modifiers=HARD["max_modifiers"],
                    filler=HARD["filler"], train_max_modifiers=HARD["train_max_modifiers"])
    assert [sum(e.attractors == k for e in hard["test"]) for k in range(9)] == [10] * 9
    assert max(e.intervening for e in hard["train"]) <= HARD["train_max_modifiers"]
    assert max(e.intervening for e in hard["test"]) == 8  # distances never seen in training
    length = {name: sum(len(e.text.split()) for e in s["test"]) / len(s["test"]) for name, s in
              (("easy", easy), ("hard", hard))}
    assert length["hard"] > 1.5 * length["easy"]


def test_hard_agreement_from_the_command_line(tmp_path, capsys):
    from attnmt.cli.main import main

    assert main(["data", "agreement", "--out", str(tmp_path), "--hard", "--train", "50",
                 "--test-per-bucket", "2"]) == 0
    test = (tmp_path / "test.tsv").read_text().splitlines()
    assert len(test) == 2 * 9 and len((tmp_path / "train.tsv").read_text().splitlines()) == 50
    assert main(["data", "agreement", "--out", str(tmp_path), "--max-modifiers", "3",
                 "--train-max-modifiers", "4"]) == 2


def test_accuracy_by_group():
    result = accuracy_by_group([0, 1, 1, 0], [0, 1, 0, 0], ["0", "1", "1", "0"])
    assert result["all"] == {"accuracy": 0.75, "n": 4}
    assert result["1"]["accuracy"] == 0.5 and result["0"]["accuracy"] == 1.0


def test_classifier_trains_end_to_end(tmp_path):
    from attnmt.eval.classify import evaluate_file
    from attnmt.train.run import run_training

    rng = random.Random(0)
    rows = []
    for _ in range(240):  # label = whether the sentence mentions a fruit
        fruit = rng.random() < 0.5
        words = rng.sample(["the", "a", "big", "red", "on", "table", "chair"], 3)
        words.insert(rng.randint(0, 3), rng.choice(["apple", "pear"]) if fruit else rng.choice(["stone", "box"]))
        rows.append(f"{' '.join(words)}\t{'fruit' if fruit else 'other'}\t{len(words)}")
    _write(tmp_path / "train.tsv", rows[:200])
    _write(tmp_path / "dev.tsv", rows[200:])
    config = tmp_path / "c.yaml"
    config.write_text(
        f"task: classify\ndata: {{train: {tmp_path}/train.tsv, dev: {tmp_path}/dev.tsv, tokenizer: word}}\n"
        "model: {type: transformer, layers: 1, hidden: 16, heads: 2, ff: 32, dropout: 0.0,\n"
        "        enc_self_attention: window-add-seg, window_segment: 2}\n"
        "train: {optimizer: adam, lr: 0.01, warmup: 1, batch_size: 40, max_steps: 40, valid_every: 20}\n"
    )
    summary = run_training(str(config), str(tmp_path / "run"), [], False)
    assert summary["step"] == 40
    result = evaluate_file(str(tmp_path / "run"), str(tmp_path / "dev.tsv"))
    assert result["n"] == 40 and result["accuracy"] >= 0.9
    assert set(result["by_group"]) == {"4"}
    assert (tmp_path / "run" / "labels.txt").read_text() == "fruit\nother\n"
