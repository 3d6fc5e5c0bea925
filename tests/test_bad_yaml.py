"""The malformed-input zoo, hostile YAML: configs (and --set values) that explode, recurse, smuggle keys
or pass text for numbers. Each is refused by strict_yaml.StrictLoader or the bounds within a time limit,
with exit status 2 and one line naming file:line (or --set) and the key. The runner is
tests/bad_input_zoo.py."""

from __future__ import annotations

import pytest

from bad_input_zoo import assert_fails

from attnmt.config import load_config

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))

CASES = [
    ("alias-bomb", BOMB + "train: {lr: 1}\n", 1, ("aliases",)),
    ("recursive-alias", "train: {lr: 1}\nx: &x [*x]\n", 2, ("aliases",)),
    ("alias-of-a-section", "model: &m {layers: 1}\ntrain: *m\n", 1, ("aliases",)),
    ("merge-key", "train:\n  lr: 1\n  <<: {lr: 2}\n", 3, ("merge keys",)),
    ("merge-key-top", "<<: {train: {lr: 2}}\n", 1, ("merge keys",)),
    ("quoted-int", 'train:\n  max_steps: "10"\n', 2, ("train.max_steps", "quoted")),
    ("quoted-float", "train: {lr: '0.5'}\n", 1, ("train.lr", "quoted")),
    ("quoted-bool", 'train: {amp: "false"}\n', 1, ("train.amp", "quoted")),
    ("float-for-int", "train: {max_steps: 1e3}\n", 1, ("train.max_steps", "expected int")),
    ("huge-int", "train: {max_steps: 1000000000000000000000000000000}\n", 1, ("train.max_steps", "at most")),
    ("huge-layers", "model: {layers: 100000}\n", 1, ("model.layers", "at most 1000")),
    ("5000-digits", "train: {max_steps: " + "9" * 5000 + "}\n", 1, ("digits",)),
    ("float-overflow", "train: {max_time: 1e999}\n", 1, ("train.max_time", "finite")),
    ("huge-vocab", "data: {src_vocab_size: 10000000000}\n", 1, ("data.src_vocab_size", "at most")),
]


@pytest.mark.parametrize("text,line,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_yaml_config(text, line, words, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text, encoding="utf-8")
    assert_fails(tmp_path, ["train", str(cfg), "--out", str(tmp_path / "run")], (f"{cfg}:{line}:", *words),
                 timeout=20)


SET_CASES = [
    ("alias", "model.type=&a [*a]", ("aliases",)),
    ("bomb", "model.type=[&a [1,1], &b [*a,*a], &c [*b,*b], *c]", ("aliases",)),
    ("huge", "train.max_steps=1000000000000000000000000000000", ("train.max_steps", "at most")),
    ("digits", "train.max_steps=" + "9" * 5000, ("digits",)),
    ("negative-huge", "train.seed=-1000000000000000000000", ("train.seed", "at most")),
]


@pytest.mark.parametrize("item,words", [c[1:] for c in SET_CASES], ids=[c[0] for c in SET_CASES])
def test_hostile_set_value(item, words, tmp_path, tiny_corpus):
    assert_fails(tmp_path, ["train", str(tiny_corpus.config), "--out", str(tmp_path / "run"), "--set", item],
                 ("--set", *words), timeout=20)


def test_text_for_a_number_says_quoted_only_when_it_was(tmp_path, tiny_corpus, capsys):
    from attnmt.cli.main import main

    out = str(tmp_path / "run")
    assert main(["train", str(tiny_corpus.config), "--out", out, "--set", "train.lr=abc"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "attnmt: error: --set: train.lr: expected float, got 'abc'"
    assert main(["train", str(tiny_corpus.config), "--out", out, "--set", "train.lr='0.5'"]) == 2
    assert "expected float, got '0.5' (quoted: a string)" in capsys.readouterr().err


def test_a_mistyped_key_gets_a_did_you_mean(tmp_path, tiny_corpus, capsys):
    from attnmt.cli.main import main

    out = str(tmp_path / "run")
    assert main(["train", str(tiny_corpus.config), "--out", out, "--set", "train.learning_rat=0.1"]) == 2
    assert "unknown key train.learning_rat (known:" in capsys.readouterr().err  # nothing close
    assert main(["train", str(tiny_corpus.config), "--out", out, "--set", "train.max_step=10"]) == 2
    assert "unknown key train.max_step (did you mean train.max_steps?; known:" in capsys.readouterr().err
    path = tmp_path / "c.yaml"
    path.write_text("modle:\n  layers: 1\n", encoding="utf-8")
    assert main(["train", str(path), "--out", out]) == 2
    assert f"{path}:1: unknown section 'modle' (did you mean 'model'?;" in capsys.readouterr().err


def test_numbers_stay_numbers(tmp_path, tiny_corpus):
    """--set train.max_steps=10 is a number (only a quoted file value is text); a plain 1e-3 in a
    file is a float (PyYAML's YAML 1.1 would read the string '1e-3'); strings stay strings."""
    cfg = load_config(tiny_corpus.config, ["train.max_steps=10", "train.lr=1e-3", "data.src=10"])
    assert cfg.train.max_steps == 10 and cfg.train.lr == 0.001 and cfg.data.src == "10"
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  lr: 2e-4\n  max_time: 5\ndata: {src: '1e3', tgt: es}\n", encoding="utf-8")
    cfg = load_config(path)
    assert cfg.train.lr == 2e-4 and cfg.train.max_time == 5.0 and cfg.data.src == "1e3"
