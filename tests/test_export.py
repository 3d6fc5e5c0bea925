"""attnmt export --format ctranslate2: CTranslate2's greedy search on the exported model gives
attnmt's greedy output token for token (standard, post-norm with learned positions and shared
embeddings, relative positions in the lowest layer), int8 export translates, and what
CTranslate2 cannot express or an --out in the way is refused with one line, exit 2."""

from __future__ import annotations

import json
import random
import signal

import pytest
import torch

from attnmt.cli.main import main
from attnmt.decode.translate import Translator

ctranslate2 = pytest.importorskip("ctranslate2", reason="CTranslate2 is not installed: pip install 'attnmt[ctranslate2]'")

from attnmt.export.ctranslate2 import export_ctranslate2  # noqa: E402

WORDS = "a b c d e f g h i j".split()


def _pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Reverse the sequence and upper-case it: 'a b c' -> 'C B A'."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = [rng.choice(WORDS) for _ in range(rng.randint(2, 7))]
        out.append((" ".join(s), " ".join(w.upper() for w in reversed(s))))
    return out


def _write(path, lines):
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")


def _train(root, name: str, model: str, steps: int = 150):
    """A 2-layer Transformer trained for ``steps`` updates on the reverse task (a few seconds)."""
    from attnmt.train.run import run_training

    data = root / "data"
    if not data.exists():
        data.mkdir()
        pairs = _pairs(400, 0)
        _write(data / "train.en", [s for s, _ in pairs])
        _write(data / "train.es", [t for _, t in pairs])
        _write(data / "dev.en", [s for s, _ in pairs[:30]])
        _write(data / "dev.es", [t for _, t in pairs[:30]])
    config = root / f"{name}.yaml"
    config.write_text(
        f"data: {{train: {data}/train, dev: {data}/dev, tokenizer: word}}\n"
        f"model: {{type: transformer, layers: 2, hidden: 32, heads: 4, ff: 64, dropout: 0.0, {model}}}\n"
        f"train: {{optimizer: adam, lr: 0.005, warmup: 10, batch_size: 40, max_steps: {steps},\n"
        f"         valid_every: {steps}, device: cpu, threads: 1, amp: false, seed: 1}}\n",
        encoding="utf-8")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    threads = torch.get_num_threads()
    try:
        run_training(str(config), str(root / name), [], False)
    finally:  # the trainer installs its own handlers and thread count
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
    return root / name


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """name, model settings -> its run, trained once per module (the int8 test reuses "pre")."""
    root, done = tmp_path_factory.mktemp("runs"), {}

    def get(name: str, model: str):
        if name not in done:
            done[name] = _train(root, name, model)
        return done[name]

    return get


PRE = "norm: pre, positions: sinusoidal"
SOURCES = [s for s, _ in _pairs(12, 7)] + ["a", "j i h g f e d c b a", "b b b b"]


def _parity(run, out, quantization=None, sources=SOURCES):
    """(attnmt's greedy pieces, CTranslate2's greedy pieces) of ``sources``."""
    assert main(["export", "--format", "ctranslate2", "--model", str(run), "--out", str(out),
                 *(["--quantization", quantization] if quantization else [])]) == 0
    ours = Translator.from_run(run, device="cpu").translate(sources, beam=1)
    ct2 = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    # one sentence a call: attnmt's length limit, 2 |x| + 10, is per sentence
    theirs = [ct2.translate_batch([s.split()], beam_size=1, max_decoding_length=2 * len(s.split()) + 10)[0]
              for s in sources]
    return [t[0].tgt_pieces for t in ours], [r.hypotheses[0] for r in theirs]


@pytest.mark.parametrize("name,model", [
    ("pre", PRE),
    ("post", "norm: post, positions: learned, max_positions: 16, share_embeddings: true, tie_output: false"),
    ("relative", "positions: none, enc_self_attention: relative, dec_self_attention: relative, "
                 "attention_layers: 1, relative_clip: 3"),
])
def test_ctranslate2_greedy_equals_attnmt_greedy(trained, tmp_path, name, model):
    run = trained(name, model)
    long = [" ".join(WORDS * 3)] if name == "post" else []  # 30 words: past the learned table's 16 rows
    ours, theirs = _parity(run, tmp_path / "ct2", sources=SOURCES + long)
    assert theirs == ours
    ours = ours[: len(SOURCES)]
    ended = sum(len(p) < 2 * len(s.split()) + 10 for p, s in zip(ours, SOURCES))
    assert ended >= 0.8 * len(SOURCES), ours  # trained: most outputs end with </s>, not at the limit
    info = json.loads((tmp_path / "ct2" / "attnmt.json").read_text())
    assert info["quantization"] == "float32" and info["tokenizer"] == "word"
    # the serving side: text in, text out, through the run's tokenizers copied into the directory
    _write(tmp_path / "in.en", [*SOURCES[:4], "", *SOURCES[4:6]])
    common = ["--input", str(tmp_path / "in.en"), "--beam", "1", "--batch-size", "1"]  # 1: the same length limits
    assert main(["translate", "--model", str(run), *common, "-o", str(tmp_path / "attnmt.es")]) == 0
    assert main(["translate", "--engine", "ctranslate2", "--model", str(tmp_path / "ct2"), *common,
                 "-o", str(tmp_path / "ct2.es")]) == 0
    want = (tmp_path / "attnmt.es").read_text(encoding="utf-8")
    assert (tmp_path / "ct2.es").read_text(encoding="utf-8") == want and want.splitlines()[4] == ""


def test_int8_export_translates_like_float32(trained, tmp_path):
    run = trained("pre", PRE)
    ours, theirs = _parity(run, tmp_path / "int8", "int8")
    same = sum(a == b for a, b in zip(ours, theirs))
    assert same >= 0.8 * len(SOURCES), (same, ours, theirs)
    assert json.loads((tmp_path / "int8" / "attnmt.json").read_text())["quantization"] == "int8"
    # the weight matrices in 8 bits (the position table stays float32)
    assert (tmp_path / "int8" / "model.bin").stat().st_size < 0.7 * _float32_size(run, tmp_path)


def _float32_size(run, tmp_path) -> int:
    export_ctranslate2(run, tmp_path / "f32")
    return (tmp_path / "f32" / "model.bin").stat().st_size


@pytest.mark.parametrize("model,key", [
    ("enc_self_attention: window-add-seg", "model.enc_self_attention: window-add-seg"),
    ("cross_attention: localness", "model.cross_attention: localness"),
    ("enc_self_attention: relative", "model.positions: sinusoidal with relative"),
])
def test_inexpressible_variants_are_refused_with_one_line(tmp_path, capsys, model, key):
    from analysis_fixtures import make_run

    run = make_run(tmp_path, "run", ["model.type=transformer", "model.heads=2", "model.ff=32",
                                     *(f"model.{kv.replace(': ', '=')}" for kv in model.split(", "))])
    assert main(["export", "--format", "ctranslate2", "--model", str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and key in err and "config.yaml" in err
    assert not (tmp_path / "out").exists()


def test_lstm_and_lm_runs_are_refused(tmp_path, capsys):
    from analysis_fixtures import make_run

    lstm = make_run(tmp_path, "lstm")
    assert main(["export", "--format", "ctranslate2", "--model", str(lstm), "--out", str(tmp_path / "o")]) == 2
    assert "model.type: lstm" in capsys.readouterr().err
    lm = make_run(tmp_path, "lm", ["task=lm", "model.type=transformer", "model.heads=2", "model.ff=32"])
    assert main(["export", "--format", "ctranslate2", "--model", str(lm), "--out", str(tmp_path / "o")]) == 2
    assert "task: lm" in capsys.readouterr().err


def test_ctranslate2_engine_refuses_what_it_cannot_do(trained, tmp_path, capsys):
    run = trained("pre", PRE)
    assert main(["export", "--format", "ctranslate2", "--model", str(run), "--out", str(tmp_path / "ct2")]) == 0
    capsys.readouterr()
    for flags in (["--alignments", str(tmp_path / "a")], ["--int8"], ["--workers", "2"], ["--stop", "complete"],
                  ["--inter-threads", "0"], ["--raw-weights"]):
        assert main(["translate", "--engine", "ctranslate2", "--model", str(tmp_path / "ct2"), *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and flags[0] in err
    assert main(["translate", "--model", str(run), "--inter-threads", "2"]) == 2  # attnmt's engine: no-op
    assert "--inter-threads is for --engine ctranslate2" in capsys.readouterr().err
    assert main(["translate", "--engine", "ctranslate2", "--model", str(run), "--input", str(tmp_path / "ct2" / "src.vocab")]) == 2
    assert "not an attnmt CTranslate2 export" in capsys.readouterr().err  # a run, not an export


def test_ctranslate2_engine_takes_nbest_and_prefix(trained, tmp_path, capsys):
    """--nbest through num_hypotheses (the first entries are the plain output, LINE 1-based as
    attnmt's), --prefix through target_prefix (each output starts with its prefix)."""
    from attnmt.eval.nbest import read_nbest

    run = trained("pre", PRE)
    ct2 = tmp_path / "ct2"
    assert main(["export", "--format", "ctranslate2", "--model", str(run), "--out", str(ct2)]) == 0
    src = tmp_path / "in.en"
    _write(src, [*SOURCES, ""])
    engine = ["translate", "--engine", "ctranslate2", "--model", str(ct2), "-i", str(src), "--beam", "4"]
    capsys.readouterr()
    assert main(engine) == 0
    plain = capsys.readouterr().out.splitlines()
    assert main([*engine, "--nbest", "3", "-o", str(tmp_path / "n.txt")]) == 0
    groups = read_nbest(tmp_path / "n.txt", len(SOURCES) + 1)
    assert [len(g) for g in groups] == [3] * len(SOURCES) + [0]
    assert [g[0].text if g else "" for g in groups] == plain
    prefixes = ["C B", "", *(["A"] * (len(SOURCES) - 2)), ""]
    _write(tmp_path / "p.es", prefixes)
    assert main([*engine, "--prefix", str(tmp_path / "p.es")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert all(o.split()[: len(p.split())] == p.split() for o, p in zip(out, prefixes))
    assert out[1] == plain[1] and out[-1] == ""


def test_ctranslate2_layout_one_single_threaded_replica_per_core(monkeypatch):
    from attnmt.export import ct2_translate
    from attnmt.export.ct2_translate import Layout, layout

    assert layout("cpu", cores=8) == Layout(8, 1, 16)
    assert layout("cpu", cores=8, inter_threads=2, intra_threads=4, max_batch_size=64) == Layout(2, 4, 64)
    assert layout("cuda", cores=8) == Layout(1, 1, 64)
    monkeypatch.setattr(ct2_translate.os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert layout("cpu").inter_threads == 3  # the cores this process may use, not the machine's


def test_ctranslate2_engine_imports_no_torch(trained, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    run = trained("pre", PRE)
    assert main(["export", "--format", "ctranslate2", "--model", str(run), "--out", str(tmp_path / "ct2")]) == 0
    _write(tmp_path / "in.en", SOURCES[:3])
    code = ("import sys; from attnmt.cli.main import main; "
            f"status = main(['translate', '--engine', 'ctranslate2', '--model', {str(tmp_path / 'ct2')!r}, "
            f"'-i', {str(tmp_path / 'in.en')!r}, '-o', {str(tmp_path / 'out.es')!r}]); "
            "print(status, 'torch' in sys.modules)")
    root = Path(__file__).resolve().parents[1]  # this checkout's attnmt, not another installed one
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert done.stdout.split() == ["0", "False"], done.stderr
    assert "replicas x 1 thread, batches of 16" in done.stderr or "1 replica x 1 thread" in done.stderr
    assert len((tmp_path / "out.es").read_text().splitlines()) == 3


def test_existing_out_is_kept_unless_force(tmp_path, capsys):
    from analysis_fixtures import make_run

    run = make_run(tmp_path, "run", ["model.type=transformer", "model.heads=2", "model.ff=32"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    argv = ["export", "--format", "ctranslate2", "--model", str(run), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err and str(out) in err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert main([*argv, "--force"]) == 0
    assert not (out / "notes.txt").exists() and (out / "model.bin").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left
    assert main([*argv[:-1], str(run)]) == 2  # never over the run itself
    (tmp_path / "file").write_text("x")
    assert main([*argv[:-1], str(tmp_path / "file")]) == 2


def test_readme_serving_snippet_runs(trained, tmp_path, monkeypatch, capsys):
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", readme, re.S) if "ctranslate2.Translator" in s)
    (tmp_path / "runs").mkdir()
    export_ctranslate2(trained("pre", PRE), tmp_path / "runs" / "tf-ct2")
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet, "README.md", "exec"), {})
    assert capsys.readouterr().out.count("\n") == 1  # one translation printed
