"""The race's peer side (benchmarks/race_peers.py): the peer's schedule is attnmt's, its config says
what attnmt's says, its logs and checkpoints are read right. No peer is installed or run."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from attnmt.config import load_config
from attnmt.train.training import learning_rate

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import race_peers  # noqa: E402


def noam(lr: float, step: int, warmup: int, d: int) -> float:
    """OpenNMT-py's and eole's noam_decay times their learning_rate."""
    return lr * d**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("name,d", [("race-lstm.yaml", 512), ("race-transformer.yaml", 256)])
def test_noam_learning_rate_follows_attnmt_step_by_step(name, d):
    cfg = load_config(ROOT / "configs" / name, [f"model.hidden={d}"])
    lr = race_peers.noam_lr(cfg.train.lr, d, cfg.train.warmup)
    for step in (1, 7, cfg.train.warmup - 1, cfg.train.warmup, cfg.train.warmup + 1, 5000):
        assert noam(lr, step, cfg.train.warmup, d) == pytest.approx(learning_rate(cfg.train, 0, step), rel=1e-9)


def _config(peer, model, tmp_path, sets=()):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for lang, lines in (("en", ["a b", "a " * 120]), ("es", ["c d e", "c"])):
        (data / f"train.sp.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    name = "race-lstm.yaml" if model == "lstm" else "race-transformer.yaml"
    cfg = load_config(ROOT / "configs" / name, ["model.hidden=256", *sets])
    return race_peers.peer_config(peer, model, cfg, data, tmp_path / "run"), data


def test_opennmt_transformer_config_is_attnmts(tmp_path):
    c, _ = _config("opennmt", "transformer", tmp_path, ["model.heads=4", "model.ff=1024"])
    assert (c["encoder_type"], c["enc_layers"], c["hidden_size"], c["heads"], c["transformer_ff"]) == (
        "transformer", 3, 256, 4, 1024)
    assert c["share_decoder_embeddings"] and c["add_qkvbias"] and c["position_encoding"]
    assert c["decay_method"] == "noam" and c["warmup_steps"] == 200
    assert c["learning_rate"] == pytest.approx(0.002 * math.sqrt(256 * 200), rel=1e-5)
    assert (c["adam_beta2"], c["label_smoothing"], c["max_grad_norm"]) == (0.98, 0.1, 0.0)
    assert (c["batch_type"], c["batch_size"], c["src_seq_length"]) == ("tokens", 2000, 100)


def test_eole_config_nests_the_same_recipe_and_filters_long_pairs(tmp_path):
    c, data = _config("eole", "transformer", tmp_path)
    assert c["model"]["architecture"] == "transformer" and c["model"]["generator_bias"] is False
    t = c["training"]
    assert (t["decay_method"], t["adam_beta2"], t["adam_eps"], t["label_smoothing"]) == ("noam", 0.98, 1e-9, 0.1)
    src = Path(c["data"]["corpus_1"]["path_src"]).read_text(encoding="utf-8").splitlines()
    assert src == ["a b"]  # the 120-piece source is dropped, as OpenNMT-py's filtertoolong does
    lstm, _ = _config("eole", "lstm", tmp_path)
    assert lstm["model"]["decoder"]["global_attention"] == "general" and lstm["model"]["input_feed"] == 1
    assert lstm["training"]["param_init_method"] == "uniform" and lstm["training"]["max_grad_norm"] == 5.0


def test_peer_recipe_is_opennmts_reference_and_post_norm_is_refused(tmp_path):
    cfg = load_config(ROOT / "configs" / "race-lstm.yaml")
    c = race_peers.peer_config("opennmt", "lstm", cfg, tmp_path, tmp_path / "run", recipe="peer")
    assert (c["learning_rate"], c["max_grad_norm"]) == (0.001, 5) and "decay_method" not in c
    with pytest.raises(race_peers.RaceError, match="norm"):
        _config("opennmt", "transformer", tmp_path, ["model.norm=post"])


def test_reports_read_both_peers_logs(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "[2026-12-03 18:32:00,100 INFO] Step 25/100000; acc: 1.0; ppl: 900; xent: 6.8; lr: 0.0003; "
        "sents: 1600; bsz: 1500/1700/64; 2000/2200 tok/s; 30 sec;\n"
        "[2026-12-03 18:32:36,331 INFO] Step  50/    4; acc: 0.0; ppl: 1393.89; xent: 7.24; aux: 0.000; "
        "lr: 2.00e-05; sents:      58; bsz:  982/1020/29;  32/ 33 tok/s;     62 sec;\n"
        "[2026-12-03 18:32:37,000 INFO] Saving checkpoint\n", encoding="utf-8")
    (t0, s0, k0), (t1, s1, k1) = race_peers.reports(log)
    assert (s0, k0, s1, k1) == (25, 25 * 1700, 50, 25 * 1700 + 25 * 1020)
    assert t1 - t0 == pytest.approx(36.231)


def test_checkpoints_skip_half_written_eole_folders(tmp_path):
    for step, files in ((25, ("config.json", "vocab.json", "model.00.safetensors")), (50, ("config.json",))):
        folder = tmp_path / "model" / f"step_{step}"
        folder.mkdir(parents=True)
        for f in files:
            (folder / f).write_text("x")
    assert [s for s, _ in race_peers.checkpoints("eole", tmp_path)] == [25]
    (tmp_path / "model_step_100.pt").write_text("x")
    (tmp_path / "model_step_75.pt").write_text("x")
    assert [s for s, _ in race_peers.checkpoints("opennmt", tmp_path)] == [75, 100]


def test_gold_score_is_read_or_refused(tmp_path):
    log = tmp_path / "gold.log"
    log.write_text("[x INFO] GOLD SCORE: -40.5000, GOLD PPL: 12.30 NB SENTENCES: 10\n", encoding="utf-8")
    assert race_peers.gold_logprob(log) == pytest.approx(-405.0)
    log.write_text("nothing\n", encoding="utf-8")
    with pytest.raises(race_peers.RaceError, match="GOLD"):
        race_peers.gold_logprob(log)


def test_ratios_name_the_fastest_ctranslate2_layout():
    import peer_race

    assert peer_race.ct2_threads("intra", 2) == (2, 1) and peer_race.ct2_threads("inter", 2) == (1, 2)
    row = {"attnmt": {"tgt_tok_s": 3000.0, "translate_s": 20.0, "bleu": 15.0},
           "opennmt": {"tgt_tok_s": 2000.0, "translate_s": 45.0, "bleu": 14.0,
                       "ct2": {"float32": {"translate_s": 42.0}, "int8-inter": {"translate_s": 30.0}}}}
    r = peer_race.ratios(row, "opennmt")
    assert (r["tgt_tok_s"], r["translate_speed"], r["bleu_diff"]) == (1.5, 2.25, 1.0)
    assert r["ct2_best"] == "int8-inter" and r["translate_speed_vs_ct2"] == 1.5
    assert "translate_speed_int8" not in r  # the Transformer has no --int8 row (yet)


def test_ratios_against_ctranslate2_on_attnmts_own_model():
    import peer_race

    row = {"attnmt": {"tgt_tok_s": 3000.0, "translate_s": 20.0, "translate_int8_s": 16.0, "bleu": 15.0,
                      "ct2": {"float32": {"translate_s": 30.0}, "int8": {"translate_s": 24.0},
                              "int8-inter": {"translate_s": 22.0}}},
           "opennmt": {"tgt_tok_s": 2000.0, "translate_s": 45.0, "bleu": 14.0}}
    r = peer_race.ratios(row, "opennmt")
    assert r["ct2_same_model_best"] == "int8-inter" and r["translate_speed_vs_ct2_same_model"] == 1.1
    assert r["translate_speed_int8_vs_ct2_same_model"] == round(22.0 / 16.0, 3)  # both at their best
    assert r["translate_speed_int8"] == round(45.0 / 16.0, 3)
    assert "ct2_best" not in r  # the peer was not converted
    assert "translate_speed_int8_vs_ct2_same_rule" not in r
    row["attnmt"]["translate_int8_complete_s"] = 20.0  # --stop complete: CTranslate2's rule
    assert peer_race.ratios(row, "opennmt")["translate_speed_int8_vs_ct2_same_rule"] == 1.1


def test_a_side_raced_earlier_stands_in_a_row_only_with_the_same_settings(tmp_path):
    import argparse

    import peer_race

    args = argparse.Namespace(model="transformer", recipe="attnmt", budget=600.0, threads=2, ct2="float32,int8",
                              set=[], max_train_lines=0, max_eval_lines=0, report_every=25)
    side = tmp_path / "opennmt"
    side.mkdir()
    assert peer_race.load_side(side, args) is None
    peer_race.save_side(side, {"tgt_tok_s": 2000.0, "translate_s": 40.0}, args)
    loaded = peer_race.load_side(side, args)
    assert loaded["tgt_tok_s"] == 2000.0 and "earlier run" in loaded["raced"]
    assert not (side / "result.json.tmp").exists()
    args.ct2 = "int8"  # other CTranslate2 columns: still the same race
    assert peer_race.load_side(side, args)["tgt_tok_s"] == 2000.0
    args.budget = 300.0
    assert peer_race.load_side(side, args) is None  # another budget: not the same race


def test_a_row_whose_sides_ran_apart_says_so(tmp_path):
    import argparse
    import json

    import peer_race
    import race_sides

    args = argparse.Namespace(model="transformer", recipe="attnmt", budget=600.0, threads=2, ct2="int8",
                              set=[], max_train_lines=0, max_eval_lines=0, report_every=25)
    side = tmp_path / "opennmt"
    side.mkdir()
    peer_race.save_side(side, {"tgt_tok_s": 2000.0, "translate_s": 40.0}, args)
    loaded = peer_race.load_side(side, args)
    row = {"attnmt": {"tgt_tok_s": 4000.0}, "opennmt": loaded}
    now = loaded["raced_at"]
    assert race_sides.apart_note(row, ("attnmt", "opennmt"), 600, now + 600 + 300) == ""  # as in one run
    note = race_sides.apart_note(row, ("attnmt", "opennmt"), 600, now + 3 * 3600)
    assert "opennmt side ran 180 min before" in note and "earlier run" in note
    assert race_sides.apart_note({"attnmt": {}, "opennmt": {}}, ("attnmt", "opennmt"), 600) == ""  # both now
    record = json.loads((side / "result.json").read_text())
    record["finished"] = "yesterday"  # a hand-edited record: its time unreadable
    (side / "result.json").write_text(json.dumps(record))
    row["opennmt"] = peer_race.load_side(side, args)
    assert row["opennmt"]["raced_at"] is None
    assert "opennmt side is from an earlier run of unknown time" in race_sides.apart_note(row, ("attnmt", "opennmt"), 600)


def test_the_median_rate_ignores_a_disturbed_stretch():
    import peer_race

    # 25 updates of 2,500 pieces per 1 s report, except one report that took 5 s
    times = [0, 1, 2, 7, 8, 9]
    records = [(t, 25 * i, 2500 * i) for i, t in enumerate(times)]
    r = peer_race.rates(records, budget=10, steps=125, tokens=12500)
    assert r["tgt_tok_s"] == round(12500 / 9, 1) and r["tgt_tok_s_median"] == 2500.0


def test_ctranslate2_runs_each_type_layout_and_batch_size(tmp_path, monkeypatch):
    """Per compute type: one translation on all threads in batches of 64, and batches at once on
    one thread each in batches of 64; int8 also in batches of 32 and 16 (CTranslate2's fastest on
    2 vCPUs)."""
    import json

    import peer_race

    commands = []

    def fake_run(cmd, log, env):
        commands.append(cmd)
        Path(cmd[5]).write_text("a b\n", encoding="utf-8")  # the hypotheses in pieces
        log.write_text(json.dumps({"compute_type": cmd[cmd.index("--compute-type") + 1], "busy_threads": 1,
                                   "isa": "auto", "cpu_s": 1.0}) + "\n", encoding="utf-8")
        return 10.0 if cmd[cmd.index("--batch") + 1] == "32" else 12.0

    monkeypatch.setattr(peer_race, "run", fake_run)
    monkeypatch.setattr(peer_race, "scored_pieces", lambda hyp, data, refs: {"bleu": 1.0, "chrf": 2.0})
    out = peer_race.ct2_translations("python", {}, tmp_path / "ct2", tmp_path, tmp_path, 2, ["float32", "int8"], ["x"])
    assert list(out) == ["float32", "float32-inter", "int8", "int8-inter", "int8-inter-b32", "int8-inter-b16"]
    assert [out[k]["batch"] for k in out] == [64, 64, 64, 64, 32, 16]
    threads = [(c[c.index("--threads") + 1], c[c.index("--inter") + 1]) for c in commands]
    assert threads == [("2", "1"), ("1", "2")] * 2 + [("1", "2")] * 2
    row = {"attnmt": {"tgt_tok_s": 1.0, "translate_s": 11.0, "bleu": 1.0, "ct2": out},
           "opennmt": {"tgt_tok_s": 1.0, "translate_s": 40.0, "bleu": 1.0}}
    assert peer_race.ratios(row, "opennmt")["ct2_same_model_best"] == "int8-inter-b32"


def test_attnmts_side_runs_from_bytecode_like_an_installed_package(monkeypatch):
    """``attnmt_env`` compiles this checkout's modules (pip compiles the peers' and PyTorch's at
    install): a command started with it finds every module's bytecode up to date."""
    import importlib.util

    import peer_race

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = peer_race.attnmt_env(2)
    assert env["OMP_NUM_THREADS"] == "2" and str(peer_race.ROOT) in env["PYTHONPATH"]
    for source in (ROOT / "attnmt").rglob("*.py"):
        cached = Path(importlib.util.cache_from_source(str(source)))
        assert cached.is_file() and cached.stat().st_mtime >= source.stat().st_mtime, source
