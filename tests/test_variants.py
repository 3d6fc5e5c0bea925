"""The checks every registered Transformer attention variant passes, built-in or plug-in
(tests/plugins/alibi.py, imported by conftest.py as ``attnmt --user-dir`` imports a folder): a
variant is tested by being registered. Per variant, a tiny run trained with it in every attention
kind it may take saves and loads (its options included), translates, and ``attnmt export
--format ctranslate2`` writes it or refuses it in one line naming the key (its search step equals
the full forward: tests/test_transformer.py, over the same registry). The ALiBi plug-in's own
checks follow: its options in YAML and --set, a bad one refused in one line, --user-dir recorded
by the run, a missing plug-in named."""

from __future__ import annotations

import contextlib
import io
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import PLUGINS

from attnmt.attention import variant_names
from attnmt.attention.variant import unit_of
from attnmt.cli.main import main
from attnmt.config import load_config
from attnmt.export.ctranslate2 import unsupported
from attnmt.runs.checkpoint import find_checkpoint, load_weights, weights_path

VARIANTS = variant_names()
ROOT = Path(__file__).resolve().parents[1]
MODEL = ["model.type=transformer", "model.layers=1", "model.hidden=16", "model.heads=2", "model.ff=32",
         "model.dropout=0.0", "model.window_segment=2"]


def _kinds(variant: str) -> list[str]:
    cross = "standard" if unit_of(variant).self_only else variant
    return [f"model.enc_self_attention={variant}", f"model.dec_self_attention={variant}",
            f"model.cross_attention={cross}"]


def _main(args: list[str]) -> tuple[int, str]:
    """``attnmt ARGS`` in this process: (exit status, stderr)."""
    err = io.StringIO()
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with contextlib.redirect_stderr(err):
            code = main(args)
    finally:  # the trainer installs its own handlers and thread count
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
    return code, err.getvalue()


@pytest.fixture(scope="module")
def trained(tiny_corpus, tmp_path_factory):
    """variant -> a run of the tiny corpus with it (4 updates), trained once per module."""
    root, done = tmp_path_factory.mktemp("variants"), {}

    def get(variant: str) -> Path:
        if variant not in done:
            run = root / variant
            sets = [x for s in (*MODEL, *_kinds(variant), "train.max_steps=4", "train.valid_every=4") for x in ("--set", s)]
            code, err = _main(["--user-dir", str(PLUGINS), "train", str(tiny_corpus.config), "--out", str(run), *sets])
            assert code == 0, err
            done[variant] = run
        return done[variant]

    return get


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_run_with_it_saves_loads_and_translates(trained, tmp_path, variant):
    from attnmt.runs.loader import load_run

    run = trained(variant)
    cfg = load_config(run / "config.yaml")
    assert (cfg.model.enc_self_attention, cfg.model.dec_self_attention) == (variant, variant)
    loaded = load_run(str(run), device="cpu")
    assert loaded.cfg == cfg and {m.variant for m in loaded.network.encoder.modules() if hasattr(m, "unit")} == {variant}
    state = loaded.network.state_dict()
    saved = load_weights(weights_path(find_checkpoint(run)))  # the run's own weights, its options' too
    assert saved.keys() == state.keys() and all(torch.equal(state[n], t) for n, t in saved.items())
    src = tmp_path / "src.en"
    src.write_text("the big dog sees a small flower\na cat\n", encoding="utf-8")
    out = tmp_path / "out.es"
    code, err = _main(["translate", "--model", str(run), "--input", str(src), "-o", str(out), "--beam", "3",
                       "--device", "cpu"])
    assert code == 0, err
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2


@pytest.mark.parametrize("variant", VARIANTS)
def test_export_writes_it_or_refuses_in_one_line(trained, tmp_path, variant):
    run = trained(variant)
    why = unsupported(load_config(run / "config.yaml"))
    code, err = _main(["export", "--format", "ctranslate2", "--model", str(run), "--out", str(tmp_path / "ct2")])
    if why is None:  # CTranslate2 runs it (standard attention)
        pytest.importorskip("ctranslate2")
        assert code == 0, err
        return
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("attnmt: error: ") and "cannot export to CTranslate2: model." in err, err


def _alibi_config(tiny_corpus, tmp_path, body: str, name: str = "alibi") -> Path:
    """The tiny corpus's config as a Transformer with ALiBi everywhere and ``body`` in its model section."""
    raw = yaml.safe_load(tiny_corpus.config.read_text(encoding="utf-8"))
    raw.pop("model")  # then last: ``body`` continues it
    raw["model"] = {"type": "transformer", "layers": 1, "hidden": 16, "heads": 2, "ff": 32,
                    "enc_self_attention": "alibi", "dec_self_attention": "alibi", "cross_attention": "alibi"}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False).rstrip("\n") + "\n" + body, encoding="utf-8")
    return path


def test_the_plug_ins_options_are_its_own_keys(tiny_corpus, tmp_path):
    from alibi import AlibiOptions

    from attnmt.config import apply_overrides, save_config
    from attnmt.errors import UserError

    path = _alibi_config(tiny_corpus, tmp_path, "  alibi: {slope_base: 4, max_distance: 6}\n")
    cfg = load_config(path)
    assert cfg.model.variant_options == {"alibi": AlibiOptions(slope_base=4.0, max_distance=6)}
    assert apply_overrides(cfg, ["model.alibi.max_distance=2"]).model.variant_options["alibi"].max_distance == 2
    save_config(cfg, tmp_path / "saved.yaml")  # a run's config.yaml: the section as written
    assert yaml.safe_load((tmp_path / "saved.yaml").read_text())["model"]["alibi"] == {"slope_base": 4.0, "max_distance": 6}
    assert load_config(tmp_path / "saved.yaml") == cfg
    line = len(path.read_text().splitlines())
    with pytest.raises(UserError, match=rf"bad.yaml:{line}: model.alibi.slope_base must be > 0, got -1.0"):
        load_config(_alibi_config(tiny_corpus, tmp_path, "  alibi: {slope_base: -1}\n", "bad"))
    with pytest.raises(UserError, match=r"--set: model.alibi.max_distance must be >= 0"):
        load_config(path, ["model.alibi.max_distance=-3"])
    with pytest.raises(UserError, match=r"unknown key model.alibi.slope \(known: slope_base, max_distance\)"):
        load_config(_alibi_config(tiny_corpus, tmp_path, "  alibi: {slope: 2}\n", "unknown"))
    with pytest.raises(UserError, match=r"model.alibi.max_distance: expected int, got 'far'"):
        load_config(path, ["model.alibi.max_distance=far"])


def test_the_run_records_the_plug_ins_and_says_what_is_missing(trained, tiny_corpus, tmp_path):
    """The run's config.yaml names the --user-dir folder, which reading it imports; a run whose
    folder is gone is one line, unless --user-dir says where the plug-ins are now."""
    run = trained("alibi")
    assert yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))["user_dir"] == str(PLUGINS)
    moved = tmp_path / "run"
    shutil.copytree(run, moved)
    config = moved / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace(str(PLUGINS), str(tmp_path / "gone")), encoding="utf-8")
    export = ["export", "--format", "ctranslate2", "--model", str(moved), "--out", str(tmp_path / "ct2")]
    code, err = _main(export)
    assert code == 2 and err.count("\n") == 1, err
    assert f"user_dir {tmp_path / 'gone'}: not a directory" in err and "--user-dir" in err
    code, err = _main(["--user-dir", str(PLUGINS), *export])
    assert code == 2 and err.count("\n") == 1, err  # found, and refused by export
    assert "cannot export to CTranslate2: model.enc_self_attention: alibi" in err
    assert _main([*export, "--user-dir", str(PLUGINS)]) == (code, err)  # after the command too
    # a process that imported no plug-in (conftest imports tests/plugins into this one)
    out = subprocess.run([sys.executable, "-m", "attnmt", "train", str(_alibi_config(tiny_corpus, tmp_path, "")),
                          "--out", str(tmp_path / "r")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "model.enc_self_attention must be one of standard" in out.stderr and "--user-dir" in out.stderr
