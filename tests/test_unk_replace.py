"""<unk> replacement: argmax-attended source word, dictionary, attention timing, CLI."""

from __future__ import annotations

import pytest
import torch
from analysis_fixtures import make_run, stub_member

from attnmt.cli.main import main
from attnmt.data.vocab import WordTokenizer
from attnmt.decode.force import force_attention
from attnmt.decode.translate import Translation
from attnmt.decode.unk_replace import (
    load_dictionary,
    replace_pieces,
    replace_unks,
    target_rank,
    translate_word,
)
from attnmt.errors import UserError
from attnmt.runs.loader import load_run


def test_replace_pieces_picks_argmax_attended_source_word():
    src = ["the", "Jehoshaphat,", "saw", "Anna"]
    pieces = ["el", "<unk>", "vio", "<unk>"]
    attn = torch.tensor([
        [0.7, 0.1, 0.1, 0.1],
        [0.1, 0.6, 0.2, 0.1],  # <unk> -> "Jehoshaphat," (punctuation stripped)
        [0.1, 0.1, 0.7, 0.1],
        [0.3, 0.0, 0.3, 0.4],  # <unk> -> "Anna"
    ])
    out, n, hits = replace_pieces(pieces, src, attn)
    assert out == ["el", "Jehoshaphat", "vio", "Anna"] and (n, hits) == (2, 0)
    out, n, hits = replace_pieces(pieces, src, attn, {"anna": "ana", "saw": "vio"})
    assert out == ["el", "Jehoshaphat", "vio", "Ana"] and (n, hits) == (2, 1)  # re-capitalised


def test_translate_word_lookup_order():
    d = {"Dog": "Perro", "dog": "perro", "house": "casa"}
    assert translate_word("Dog", d) == ("Perro", True)
    assert translate_word("House.", d) == ("Casa", True)
    assert translate_word("(tree)", d) == ("tree", False)
    assert translate_word("...", d) == ("...", False)  # all punctuation stays


def test_load_dictionary(tmp_path):
    f = tmp_path / "d.tsv"
    f.write_text("a\tuno\na\tuna\n# comment\n\ncat\tgato\n", encoding="utf-8")
    assert load_dictionary(str(f)) == {"a": "uno", "cat": "gato"}  # first entry wins
    f.write_text("a\tuno\nbroken line\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"d.tsv:2: expected"):
        load_dictionary(str(f))


def test_dictionary_prefers_the_translation_the_target_vocabulary_knows_best(tmp_path):
    # the file lists candidates alphabetically, as many lexicons do
    f = tmp_path / "d.tsv"
    f.write_text("water\tacuarela\nwater\tagua\nwater\tregar\nlamb\tcarne de cordero\nlamb\tcordero\n"
                 "fish\tpescado\nfish\tpez\nzeal\tcelo\n", encoding="utf-8")
    tok = WordTokenizer.build(["el agua y el agua", "agua del cordero", "regar el pez", "el pescado"], lang="es")
    table = load_dictionary(str(f), target_rank(tok))
    assert table["water"] == "agua"  # known and more frequent than "regar"; "acuarela" unknown
    assert table["lamb"] == "cordero"  # one known word over a phrase
    assert table["fish"] in ("pescado", "pez") and tok.encode(table["fish"])[0] == min(
        tok.encode("pescado")[0], tok.encode("pez")[0])  # the lower id = the more frequent
    assert table["zeal"] == "celo"  # a single entry is kept even when unknown
    assert load_dictionary(str(f))["water"] == "acuarela"  # without a vocabulary: first entry


@pytest.mark.parametrize("reverse", [False, True])
def test_force_attention_rows_in_input_order(reverse):
    line = "a b c d"
    m = stub_member(reverse, "dot", [line])
    rows = force_attention(m, [line], [[4, 5, 6]])[0]  # 3 target pieces -> 4 rows
    assert rows.shape == (4, 4)
    read = rows.argmax(1).tolist()  # model attends to read-order position r
    assert read == ([0, 1, 2, 3] if not reverse else [3, 2, 1, 0])


@pytest.mark.parametrize("score, timing, expected", [
    ("dot", None, ["a", "c"]),  # default: the row that predicts the <unk> (r = j)
    ("location", None, ["a", "c"]),
    ("dot", "paper", ["b", "d"]),  # paper, content-based: the row that reads the <unk> (r = j + 1)
    ("location", "paper", ["a", "c"]),  # paper, location: the row that predicts it
    ("dot", "input", ["b", "d"]),
    ("location", "input", ["b", "d"]),
])
def test_unk_attention_timing(score, timing, expected):
    line = "a b c d"
    m = stub_member(False, score, [line])
    unk = "<unk>"
    hyp = Translation("", 0.0, line.split(), [unk, "x", unk])
    new, stats = replace_unks([m], [line], [[hyp]], **({"timing": timing} if timing else {}))
    words = new[0][0].tgt_pieces
    assert [words[0], words[2]] == expected and words[1] == "x"
    assert stats.unks == 2 and stats.sentences == 1
    assert new[0][0].text == m.tgt_tok.decode_pieces(words)


def test_ensemble_attention_is_averaged():
    line = "a b c d"
    m1, m2, m3 = (stub_member(False, "dot", [line]) for _ in range(3))
    m2.model.shift = m3.model.shift = 2
    hyp = Translation("", 0.0, line.split(), ["<unk>"])
    # row 0 (the one predicting the <unk>): m1 attends to a, m2 and m3 to c -> c has 2/3 on average
    new, _ = replace_unks([m1, m2, m3], [line], [[hyp]])
    assert new[0][0].tgt_pieces == ["c"]
    new, _ = replace_unks([m1, m2, m3], [line], [[hyp]], timing="input")
    assert new[0][0].tgt_pieces == ["d"]  # row 1: m1 -> b, m2 and m3 -> d


def _force_unk(run):
    """Make a run always write <unk>: a large output bias on the <unk> id."""
    from safetensors.torch import load_file, save_file

    path = run / "checkpoints" / "step-00000001" / "model.safetensors"
    w = load_file(str(path))
    w["decoder.W_s.bias"][1] = 50.0
    save_file(w, str(path))


def test_cli_replace_unk_with_dictionary(tmp_path, capsys):
    run = make_run(tmp_path, overrides=["model.attention=global", "model.score=general",
                                        "data.reverse_source=true"])
    _force_unk(run)
    src = tmp_path / "in.en"
    src.write_text("the dog saw Anna\nthe cat\n", encoding="utf-8")
    d = tmp_path / "d.tsv"
    d.write_text("dog\tperro\ncat\tgato\nthe\tel\nsaw\tvio\n", encoding="utf-8")
    out = tmp_path / "out.es"
    assert main(["translate", "--model", str(run), "-i", str(src), "-o", str(out), "--beam", "1",
                 "--max-len-ratio", "1", "--replace-unk", "--dict", str(d)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert "replaced" in capsys.readouterr().err
    assert len(lines) == 2 and all("<unk>" not in x for x in lines)
    allowed = {"perro", "gato", "el", "vio", "Anna"}
    assert all(w in allowed for x in lines for w in x.split())
    # the choice is the argmax of the force-decoded attention row that predicted each <unk>
    member = load_run(run, device="cpu")
    n = len(lines[1].split())
    rows = force_attention(member, ["the cat"], [[1] * n])[0]
    expected = [{"the": "el", "cat": "gato"}[["the", "cat"][int(r.argmax())]] for r in rows[:n]]
    assert lines[1].split() == expected
    assert main(["translate", "--model", str(run), "-i", str(src), "--dict", str(d)]) == 2
