"""One truncation rule for sources longer than model.max_src_len (the location score's reach):
eval, score --model, translate and force decoding (align) all read the first max_src_len pieces,
and each command says how many sources it cut."""

from __future__ import annotations

import signal

import pytest
import torch

LIMIT = 8


@pytest.fixture(scope="module")
def location_run(tiny_corpus, tmp_path_factory):
    """A tiny global-location run that reads at most LIMIT source pieces (a few updates)."""
    from attnmt.train.run import run_training

    run_dir = tmp_path_factory.mktemp("location") / "run"
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_training(str(tiny_corpus.config), str(run_dir),
                     ["model.score=location", f"model.max_src_len={LIMIT}", f"data.max_len={LIMIT}",
                      "train.max_steps=3", "data.reverse_source=true"], resume=False)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
    return run_dir


LONG = "the red cat sees a small dog and the old girl has a white book"  # 15 words
LINES = [LONG, "the cat sees a dog", LONG + " and a flower"]
REFS = ["el gato rojo ve un perro", "el gato ve un perro", "la niña tiene una flor"]


def test_every_reader_keeps_the_first_pieces(location_run):
    from attnmt.decode.force import force_attention
    from attnmt.decode.translate import Translator
    from attnmt.eval.perplexity import encode_texts
    from attnmt.runs.loader import load_run

    run = load_run(location_run, "last", "cpu")
    want = run.source_ids([run.source(x) for x in LINES])
    first = run.src_tok.encode(LONG)[:LIMIT]
    assert want[0] == first[::-1]  # the first LIMIT pieces, then reversed as the run reads them
    assert [len(x) for x in want] == [LIMIT, 5, LIMIT]
    assert encode_texts(run, LINES, REFS)[0] == want  # eval and score --model
    translations = Translator.of(run).translate(LINES, beam=2, max_len_cap=5, at_cap="keep")
    assert [t[0].src_pieces for t in translations] == [run.src_tok.split_with_words(x)[0][:LIMIT] for x in LINES]
    rows = force_attention(run, LINES, [run.tgt_tok.encode(x) for x in REFS])  # align
    assert [r.size(1) for r in rows] == [LIMIT, 5, LIMIT]
    assert run.sources_cut(LINES) == 2


def test_commands_say_how_many_sources_were_cut(location_run, tmp_path, capsys):
    from attnmt.cli.main import main

    src, ref = tmp_path / "t.en", tmp_path / "t.es"
    src.write_text("".join(x + "\n" for x in LINES), encoding="utf-8")
    ref.write_text("".join(x + "\n" for x in REFS), encoding="utf-8")
    model = ["--model", str(location_run)]
    commands = [
        ["translate", *model, "--checkpoint", "last", "-i", str(src), "-o", str(tmp_path / "h"), "--beam", "1"],
        ["eval", *model, "--checkpoint", "last", "--input", str(tmp_path / "t")],
        ["score", *model, "--src", str(src), "--ref", str(ref)],
        ["align", *model, "--checkpoint", "last", "--src", str(src), "--tgt", str(ref), "-o", str(tmp_path / "a")],
    ]
    for argv in commands:
        assert main(argv) == 0, argv
        err = capsys.readouterr().err
        assert f"2 of 3 sources are longer than model.max_src_len = {LIMIT}" in err, (argv, err)
    short = tmp_path / "s.en"
    short.write_text("the cat sees a dog\n", encoding="utf-8")
    assert main(["translate", *model, "--checkpoint", "last", "-i", str(short), "--beam", "1"]) == 0
    assert "warning" not in capsys.readouterr().err
