"""AER, alignment parsing, force-decoded alignments (piece -> word mapping, timing), CLI."""

from __future__ import annotations

import math

import pytest
import torch
from analysis_fixtures import SRC, TGT, make_run, stub_member

from attnmt.cli.main import main
from attnmt.data.vocab import WordTokenizer
from attnmt.decode.force import word_attention
from attnmt.errors import UserError
from attnmt.eval.alignment import aer, entropy, force_align, parse_links, pharaoh


def test_parse_sure_and_possible():
    sure, possible = parse_links("0-0 2?1 1-2")
    assert sure == {(0, 0), (1, 2)} and possible == {(0, 0), (2, 1), (1, 2)}
    with pytest.raises(UserError, match=r"g.txt:3: malformed alignment link '1:2'"):
        parse_links("0-0 1:2", "g.txt", 3)


def test_aer_of_gold_against_itself_is_zero():
    gold = [parse_links("0-0 1-2 2-1 3?3"), parse_links("0-0 1?0 1-1")]
    for hyp in ([s for s, _ in gold], [p for _, p in gold]):  # A = S and A = P both give 0
        r = aer(hyp, gold)
        assert r.aer == 0.0 and r.recall == 1.0 and r.precision == 1.0


def test_aer_of_a_known_perturbation():
    # gold S = {0-0, 1-1}, P = S + {2-2}; A = {0-0, 1-2, 2-2}
    # |A∩S| = 1, |A∩P| = 2 -> AER = 1 - (1 + 2) / (3 + 2) = 0.4; precision 2/3, recall 1/2
    gold = [parse_links("0-0 1-1 2?2")]
    r = aer([{(0, 0), (1, 2), (2, 2)}], gold)
    assert r.aer == pytest.approx(0.4) and r.precision == pytest.approx(2 / 3) and r.recall == 0.5
    # two sentences are pooled (corpus counts), not averaged per sentence
    gold2 = gold + [parse_links("0-0")]
    r2 = aer([{(0, 0), (1, 2), (2, 2)}, {(0, 0)}], gold2)
    assert r2.aer == pytest.approx(1 - (2 + 3) / (4 + 3))
    with pytest.raises(UserError, match="differ in length"):
        aer([set()], gold2)


def test_entropy():
    rows = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.2, 0.2, 0.0, 0.0]])
    assert entropy(rows).tolist() == pytest.approx([math.log(4), 0.0, math.log(2)], abs=1e-6)


def test_word_attention_sums_source_pieces_and_averages_target_pieces():
    attn = torch.tensor([[0.1, 0.5, 0.4], [0.3, 0.3, 0.4]])  # 2 target pieces, 3 source pieces
    w = word_attention(attn, [0, 1, 1], [0, 0])  # source pieces 1, 2 form word 1; one target word
    assert torch.allclose(w, torch.tensor([[0.2, 0.8]]))


def test_force_align_maps_pieces_to_words_and_follows_timing():
    # Moses splits "dog," into "dog" ","; the stub attends to read-order piece r at row r
    line = "the dog, saw Anna"  # pieces: the dog , saw Anna -> words 0 1 1 2 3
    m = stub_member(False, "dot", [line])
    m.tgt_tok = WordTokenizer.build(["el perro, vio a Anna"], lang="es")
    tgt = "el perro, vio"  # pieces: el perro , vio -> words 0 1 1 2
    # default (predicted) timing: target piece j <- row j -> source piece j
    #   el -> the (w0); perro -> dog (w1); "," -> , (w1); vio -> saw (w2)
    res = force_align([m], [line], [tgt])
    assert res.links[0] == {(0, 0), (1, 1), (2, 2)}
    assert res.mean_entropy == pytest.approx(0.0) and res.max_weight == pytest.approx(1.0)
    # input timing: target piece j <- row j+1 -> source piece j+1
    #   el -> dog (w1); perro -> , (w1); "," -> saw (w2); vio -> Anna (w3)
    #   target word 1 = mean of its two pieces' rows = 0.5 w1 + 0.5 w2 -> argmax takes the first
    assert force_align([m], [line], [tgt], timing="input").links[0] == {(1, 0), (1, 1), (3, 2)}
    assert force_align([m], [line], [tgt], timing="paper").links[0] == {(1, 0), (1, 1), (3, 2)}
    m.cfg.model.score = "location"  # the paper's rule: predicted for location
    assert force_align([m], [line], [tgt], timing="paper").links[0] == {(0, 0), (1, 1), (2, 2)}
    assert pharaoh({(3, 2), (1, 0), (1, 1)}) == "1-0 1-1 3-2"


def test_cli_align_and_aer(tmp_path, capsys):
    run = make_run(tmp_path, overrides=["model.attention=local-m", "model.score=general"])
    src, tgt, gold = tmp_path / "s.en", tmp_path / "t.es", tmp_path / "g.align"
    src.write_text("\n".join(SRC) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(TGT) + "\n", encoding="utf-8")
    gold.write_text("0-0 1-2 2-1 3-3 4-4 5-5\n0-0 1-1 2-2 3-3 4-4\n0-0 1-1 2-2\n0-0 1-1 2-2 3-4 4-3\n",
                    encoding="utf-8")
    out = tmp_path / "a.align"
    assert main(["align", "--model", str(run), "--src", str(src), "--tgt", str(tgt), "-o", str(out),
                 "--gold", str(gold)]) == 0
    err = capsys.readouterr().err
    assert '"aer"' in err and '"entropy"' in err
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(TGT)
    for line, t in zip(lines, TGT):  # one link per target word, 0-based, in range
        links = [tuple(map(int, x.split("-"))) for x in line.split()]
        assert sorted(j for _, j in links) == list(range(len(t.split())))
    assert main(["aer", "--alignments", str(gold), "--gold", str(gold), "--json"]) == 0
    assert '"aer": 0.0' in capsys.readouterr().out
    bad = tmp_path / "bad.align"
    bad.write_text("0-0\n0-x\n", encoding="utf-8")
    assert main(["aer", "--alignments", str(bad), "--gold", str(gold)]) == 2
    assert "bad.align:2: malformed" in capsys.readouterr().err
    base = make_run(tmp_path, "base", ["model.attention=none", "model.input_feed=false"])
    assert main(["align", "--model", str(base), "--src", str(src), "--tgt", str(tgt)]) == 2
    assert "no attention" in capsys.readouterr().err
