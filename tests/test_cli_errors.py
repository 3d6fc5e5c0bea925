"""Bad input gets a one-line error naming the file (and line), exit status 2, no traceback."""

import subprocess
import sys

import pytest

from attnmt.cli.main import main


def _fails(capsys, argv, *expected):
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and err.startswith("attnmt: error: "), err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, (text, err)
    return err


def test_config_unknown_key_names_file_and_line(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data:\n  train: x\nmodel:\n  layers: 2\n  hiddn: 3\n")
    _fails(capsys, ["train", str(cfg), "--out", str(tmp_path / "run")], "c.yaml:5:", "model.hiddn")


def test_config_bad_type_and_malformed_yaml(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  layers: two\n")
    _fails(capsys, ["train", str(cfg), "--out", str(tmp_path / "r")], "c.yaml:2:", "expected int")
    cfg.write_text("model:\n  layers: [1,\n")
    _fails(capsys, ["train", str(cfg), "--out", str(tmp_path / "r")], "c.yaml:", "malformed YAML")
    _fails(capsys, ["train", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "r")], "nope.yaml", "not found")


def test_bad_set_override(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data:\n  train: x\n")
    _fails(capsys, ["train", str(cfg), "--out", str(tmp_path / "r"), "--set", "lr=3"], "--set")


def test_training_corpus_errors(tmp_path, capsys):
    (tmp_path / "c.en").write_text("a\nb\nc\n")
    (tmp_path / "c.es").write_text("x\ny\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data:\n  train: {tmp_path / 'c'}\n")
    _fails(capsys, ["train", str(cfg), "--out", str(tmp_path / "r")], "c.en has 3 lines", "c.es has 2")
    (tmp_path / "c.es").write_bytes(b"x\ny\n\xc3\x28 bad\n")
    _fails(capsys, ["train", str(cfg), "--out", str(tmp_path / "r")], "c.es:3:", "invalid UTF-8")


def test_translate_errors(tmp_path, capsys):
    _fails(capsys, ["translate", "--model", str(tmp_path), "--input", str(tmp_path / "x")], "x: file not found")
    (tmp_path / "x").write_text("a cat\n")  # the input is checked first, then the run
    _fails(capsys, ["translate", "--model", str(tmp_path), "--input", str(tmp_path / "x")], "config.yaml", "not found")


def test_score_line_count_mismatch(tmp_path, capsys):
    (tmp_path / "h").write_text("a\nb\n")
    (tmp_path / "r").write_text("a\n")
    _fails(capsys, ["score", "--hyp", str(tmp_path / "h"), "--ref", str(tmp_path / "r")], "2 lines", "1")


def test_corrupt_weights_are_a_user_error(tmp_path):
    from attnmt.errors import UserError
    from attnmt.runs.checkpoint import load_weights

    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(UserError, match="model.safetensors: not a valid safetensors file"):
        load_weights(bad)


def test_real_process_exit_status_and_single_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("bogus: 1\n")
    proc = subprocess.run([sys.executable, "-m", "attnmt", "train", str(cfg), "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"attnmt: error: {cfg}:1: unknown section 'bogus' (expected task, data, model")


def test_misspelt_choices_name_file_line_and_key(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    out = ["--out", str(tmp_path / "r")]
    cfg.write_text("data:\n  train: x\nmodel:\n  attention: globl\n")
    _fails(capsys, ["train", str(cfg), *out], "c.yaml:4: model.attention must be one of", "'globl'")
    cfg.write_text("data:\n  train: x\nmodel:\n  type: lstm\n  score: dott\n")
    _fails(capsys, ["train", str(cfg), *out], "c.yaml:5: model.score", "'dott'")
    _fails(capsys, ["train", str(cfg), *out, "--set", "model.score=location", "--set", "model.attention=local-p"],
           "--set: model.score", "global-attention")
    cfg.write_text("data:\n  train: x\nmodel:\n  type: transformer\n  enc_self_attention: window-ad\n")
    _fails(capsys, ["train", str(cfg), *out], "c.yaml:5: model.enc_self_attention", "window-add-seg")
    cfg.write_text("data:\n  train: x\nmodel:\n  type: transformer\n  cross_attention: relative\n")
    _fails(capsys, ["train", str(cfg), *out], "c.yaml:5: model.cross_attention", "self-attention only")
    cfg.write_text("data:\n  train: x\nmodel:\n  type: transformer\n  cross_attention: window-add\n"
                   "  window_mask: wide\n")
    _fails(capsys, ["train", str(cfg), *out], "c.yaml:6: model.window_mask", "'wide'")
    cfg.write_text("data:\n  train: x\ntrain:\n  optimizer: adamw\nngram:\n  lam: 2\n")
    _fails(capsys, ["train", str(cfg), *out], "c.yaml:4: train.optimizer", "sgd, adam")
    cfg.write_text("data:\n  train: x\nmodel:\n  type: lstm\n  hidden: 15\n  bidirectional: true\n")
    _fails(capsys, ["train", str(cfg), *out], "c.yaml:5: model.hidden", "even")
    cfg.write_text("data:\n  train: x\nmodel:\n  attention: local-p\n  score: general\n  window: 0\n")
    _fails(capsys, ["train", str(cfg), *out], "c.yaml:6: model.window", "local-p")
    assert not (tmp_path / "r").exists()  # nothing written before the config is valid


@pytest.mark.parametrize("argv,words", [
    (["data", "agreement", "--out", "x", "--seed", "x"], ("data agreement: argument --seed", "'x'")),
    (["align", "--model", "r", "--src", "a", "--tgt", "b", "--timing", "x"], ("align: argument --timing",)),
    (["translate"], ("translate: the following arguments are required: --model",)),
    (["ngram"], ("ngram: the following arguments are required",)),
    (["bogus"], ("invalid choice: 'bogus'",)),
])
def test_usage_errors_are_one_line(argv, words, capsys):
    """argparse's own errors (a bad flag value, a missing option) printed the usage, several lines,
    before its message."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    line = captured.err.strip()
    assert len(line.splitlines()) == 1 and line.startswith("attnmt: error: "), captured.err
    assert line.endswith("--help)")
    for w in words:
        assert w in line, (w, line)


def test_usage_error_real_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attnmt", "train", "c.yaml", "--out", "r", "--max-time", "abc"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["attnmt: error: train: argument --max-time: invalid float value: "
                                        "'abc' (see attnmt train --help)"]
