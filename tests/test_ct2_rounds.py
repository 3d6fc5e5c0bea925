"""benchmarks/ct2_rounds.py end to end on a tiny Transformer: the race's data step, a short
training, the export, CTranslate2's and attnmt's commands in a round, the ratios and scores."""

import json
import random
import sys
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2", reason="CTranslate2 is not installed: pip install 'attnmt[ctranslate2]'")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

WORDS = "alpha beta gamma delta epsilon zeta eta theta".split()


def _corpus(folder: Path) -> None:
    """Reverse-and-upper-case pairs for train, dev and test."""
    rng = random.Random(0)
    folder.mkdir()
    for split, n in (("train", 300), ("dev", 10), ("test", 12)):
        pairs = []
        for _ in range(n):
            s = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
            pairs.append((" ".join(s), " ".join(w.upper() for w in reversed(s))))
        for lang, side in (("en", 0), ("es", 1)):
            (folder / f"{split}.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, Path]:
    """(run, data): a tiny Transformer trained on the race's data step of a small corpus."""
    import peer_race

    from attnmt.cli.main import main as attnmt

    root = tmp_path_factory.mktemp("race")
    _corpus(root / "src")
    data = peer_race.prepare_data(root / "src", root / "data", max_train=300, max_eval=12)
    run = root / "run"
    sets = [f"data.train={data / 'train'}", f"data.src_spm={data / 'spm.en.model'}",
            f"data.tgt_spm={data / 'spm.es.model'}", "model.layers=1", "model.hidden=32", "model.heads=2",
            "model.ff=64", "train.batch_size=400", "train.max_steps=20", "train.warmup=5", "train.threads=1",
            "train.epochs=5"]
    config = Path(__file__).resolve().parent.parent / "configs" / "race-transformer.yaml"
    assert attnmt(["train", str(config), "--out", str(run), *[a for s in sets for a in ("--set", s)]]) == 0
    return run, data


def test_rounds_time_both_engines_on_the_same_weights(tiny_run, capsys, monkeypatch):
    import ct2_rounds

    run, data = tiny_run
    capsys.readouterr()
    commands, plain_run = [], ct2_rounds.run
    monkeypatch.setattr(ct2_rounds, "run", lambda cmd, *rest: commands.append(cmd) or plain_run(cmd, *rest))
    code = ct2_rounds.main(["--run", str(run), "--data", str(data), "--rounds", "1", "--threads", "1",
                            "--variant", "plain=", "--batch", "3,5"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    result = json.loads(out[-1])
    assert (run / "ct2" / "model.bin").is_file()  # exported from the run, once
    ct2, mine = result["ctranslate2"], result["attnmt"]["plain"]
    assert len(ct2["times"]) == len(mine["times"]) == 1 and ct2["mean_s"] > 0 and mine["mean_s"] > 0
    # CTranslate2's time over attnmt's (> 1: attnmt faster); the printed times are rounded
    assert mine["vs_ct2"] == pytest.approx(ct2["mean_s"] / mine["mean_s"], rel=0.15)
    assert mine["vs_ct2_rounds"] == [mine["vs_ct2"]]
    assert {"bleu", "chrf"} <= set(mine) and {"bleu", "chrf"} <= set(ct2)
    assert all(len((run / "ct2_rounds" / f"plain.b{b}.1.es").read_text(encoding="utf-8").splitlines()) == 12
               for b in (3, 5))
    assert any(line.startswith("attnmt plain (batches of") and "x (rounds" in line for line in out)
    # each engine at its best size of 3 and 5; every size's ratio beside
    assert result["batches"] == [3, 5] and set(result["by_batch"]) == {"3", "5"}
    assert ct2["batch"] in (3, 5) and mine["batch"] in (3, 5)
    assert ct2["mean_s"] == min(result["by_batch"][b]["ctranslate2"] for b in ("3", "5"))
    # both engines in batches of 3, then of 5: CTranslate2's --batch, attnmt's last --batch-size
    ct2_sizes = [c[c.index("--batch") + 1] for c in commands if any("race_ct2" in str(part) for part in c)]
    mine_sizes = [c[len(c) - c[::-1].index("--batch-size")] for c in commands if c[1:4] == ["-m", "attnmt", "translate"]]
    assert ct2_sizes == mine_sizes == ["3", "5"]


def test_each_engine_is_compared_at_its_own_best_batch_size():
    import ct2_rounds

    times = {("ctranslate2", 32): [9.0, 11.0], ("ctranslate2", 64): [12.0, 12.0],
             ("fast", 32): [12.0, 12.0], ("fast", 64): [10.0, 11.0]}
    quality = {key: {"bleu": 1.0, "chrf": 2.0} for key in times}
    result = ct2_rounds.summarise(times, quality, {"fast": "--int8"}, [32, 64])
    assert result["ctranslate2"]["batch"] == 32 and result["ctranslate2"]["mean_s"] == 10.0
    mine = result["attnmt"]["fast"]
    assert mine["batch"] == 64 and mine["mean_s"] == 10.5
    assert mine["vs_ct2"] == round(10.0 / 10.5, 3) and mine["vs_ct2_rounds"] == [0.9, 1.0]
    assert result["by_batch"]["64"]["fast"]["vs_ct2"] == round(12.0 / 10.5, 3)
    assert result["by_batch"]["32"]["ctranslate2"] == 10.0


def test_a_missing_run_is_one_line_and_exit_2(tmp_path, capsys):
    import ct2_rounds

    assert ct2_rounds.main(["--run", str(tmp_path / "nothing"), "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing" in err[0] and "config.yaml" in err[0]
    assert ct2_rounds.main(["--run", str(tmp_path), "--data", str(tmp_path), "--variant", "noequals"]) == 2
    assert ct2_rounds.main(["--run", str(tmp_path), "--data", str(tmp_path), "--batch", "32,x"]) == 2


def test_latency_translates_one_sentence_at_a_time_in_both_engines(tiny_run, capsys):
    import latency_ct2

    run, data = tiny_run
    capsys.readouterr()
    assert latency_ct2.main(["--run", str(run), "--data", str(data), "--lines", "6"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert result["lines"] == 6 and (run / "ct2" / "model.bin").is_file()
    for engine in ("attnmt", "ctranslate2"):
        r = result[engine]
        assert 0 < r["median_ms"] <= r["p90_ms"] and r["mean_ms"] > 0 and r["words"] >= 0  # a tiny model may write nothing
    assert result["median_ratio"] == pytest.approx(result["ctranslate2"]["median_ms"] / result["attnmt"]["median_ms"],
                                                   rel=0.05)
    assert out[0].startswith("attnmt ") and "CTranslate2" in out[0]
    assert latency_ct2.main(["--run", str(run / "nothing"), "--data", str(data)]) == 2
