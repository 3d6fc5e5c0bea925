"""SearchOptions (one object, bounds checked once) and the searches a user steers: forced
prefixes, lexical constraints and sampling, on untrained tiny models (LSTM, Transformer,
ensemble), through the library, the CLI, the server and the Python API."""

from __future__ import annotations

import math
import os

import pytest
import torch
from analysis_fixtures import SRC, make_run
from bad_input_zoo import assert_fails, run_cli

import attnmt
from attnmt.decode.ensemble import EnsembleTranslator, load_members
from attnmt.decode.options import BEAM_LIMIT, SearchOptions, cli_flag, workers_limit
from attnmt.decode.translate import Translator
from attnmt.errors import UserError

TRANSFORMER = ["model.type=transformer", "model.layers=1", "model.hidden=16", "model.heads=2",
               "model.ff=16"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("guided")
    return {"lstm": make_run(root, "lstm", ["model.attention=global", "model.score=general"]),
            "transformer": make_run(root, "transformer", TRANSFORMER),
            "other": make_run(root, "other", ["model.attention=global", "model.score=dot"], seed=1)}


@pytest.fixture(scope="module")
def translators(runs):
    out = {name: Translator.from_run(runs[name], device="cpu") for name in ("lstm", "transformer")}
    out["ensemble"] = EnsembleTranslator(load_members([str(runs["lstm"]), str(runs["other"])], device="cpu"))
    return out


def _pieces(translator: Translator, text: str) -> list[str]:
    return translator.run.target(text)[0]


def _contains(pieces: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return any(pieces[i : i + n] == phrase for i in range(len(pieces) - n + 1))


# -- bounds: one check, with the reason ----------------------------------------------------------------
@pytest.mark.parametrize("change, words", [
    ({"beam": 100000}, ("beam 100000 is above the limit 1000", "vocabulary")),
    ({"beam": 0}, ("beam 0 is below the minimum 1",)),
    ({"beam": 2.5}, ("beam must be a whole number",)),
    ({"beam": True}, ("beam must be a whole number",)),
    ({"beam": 3, "nbest": 4}, ("nbest 4 is above the limit 3",)),
    ({"workers": 10**6}, ("workers 1000000 is above the limit", "per CPU")),
    ({"workers": -1}, ("workers -1 is below the minimum 0",)),
    ({"max_len_ratio": 1e-300}, ("max_len_ratio 1e-300 is below the minimum 0.1",)),
    ({"max_len_ratio": 1e9}, ("max_len_ratio 1e+09 is above the limit 100",)),
    ({"max_len_ratio": math.nan}, ("max_len_ratio must be a finite number",)),
    ({"length_penalty": -0.5}, ("length_penalty -0.5 is below the minimum 0",)),
    ({"length_penalty": math.inf}, ("length_penalty must be a finite number",)),
    ({"length_penalty": 50.0}, ("length_penalty 50 is above the limit 10",)),
    ({"max_len_cap": 0}, ("max_len_cap 0 is below the minimum 1",)),
    ({"max_len_cap": 10**7}, ("max_len_cap 10000000 is above the limit 100000",)),
    ({"batch_size": 0}, ("batch_size 0 is below",)),
    ({"stop": "never"}, ("stop must be one of best, complete",)),
    ({"precision": "fp8"}, ("precision must be one of auto, bf16, float32",)),
    ({"sample": "beam=3"}, ("sample must be topk=K or topp=P",)),
    ({"sample": "topk=0"}, ("topk=0 must be between 1",)),
    ({"sample": "topk=x"}, ("topk= needs a whole number",)),
    ({"sample": "topp=1.5"}, ("topp=1.5 must be a probability",)),
    ({"sample": "topp=nan"}, ("must be a probability",)),
    ({"sample": "topk=5", "temperature": 0.0}, ("temperature 0 is below the minimum 0.01",)),
    ({"sample": "topk=5", "seed": -1}, ("seed -1 is below the minimum 0",)),
    ({"sample": "topk=5", "beam": 4, "nbest": 2}, ("nbest 2 needs beam search",)),
])
def test_search_options_refuse_absurd_settings(change, words):
    with pytest.raises(UserError) as err:
        SearchOptions(**change).validate()
    message = str(err.value)
    assert "\n" not in message
    for w in words:
        assert w in message, (w, message)


def test_search_options_accept_the_limits_and_name_the_flag():
    edge = SearchOptions(beam=BEAM_LIMIT, nbest=BEAM_LIMIT, workers=workers_limit(), max_len_ratio=0.1,
                         length_penalty=10.0)
    assert edge.validate() is edge
    assert SearchOptions(sample="topp=1", temperature=0.01, seed=0).validate().sampling() == ("topp", 1.0)
    assert hash(edge) == hash(SearchOptions(**{**edge.__dict__}))  # the server batches by value
    with pytest.raises(UserError, match="^--max-len-ratio 0.01 is below the minimum 0.1"):
        SearchOptions(max_len_ratio=0.01).validate(cli_flag)
    with pytest.raises(UserError, match="unknown search option 'beems'"):
        SearchOptions().with_(beems=3)


def test_translate_flags_out_of_bounds_exit_2(tmp_path, runs):
    src = tmp_path / "in.txt"
    src.write_text(SRC[0] + "\n", encoding="utf-8")
    base = ["translate", "--model", str(runs["lstm"]), "-i", str(src)]
    assert_fails(tmp_path, [*base, "--beam", "100000"],
                 ("--beam 100000 is above the limit 1000", "each step scores beam × vocabulary"))
    assert_fails(tmp_path, [*base, "--workers", "100000"], ("--workers 100000 is above the limit",))
    assert_fails(tmp_path, [*base, "--max-len-ratio", "1e-300"], ("--max-len-ratio", "below the minimum"))
    assert_fails(tmp_path, [*base, "--beam", "2", "--nbest", "3"], ("--nbest 3 is above the limit 2",))
    assert_fails(tmp_path, [*base, "--sample", "topk=0"], ("--sample topk=0",))
    assert_fails(tmp_path, [*base, "--temperature", "0.5"], ("--temperature needs --sample",))
    assert_fails(tmp_path, [*base, "--seed", "1"], ("--seed needs --sample",))


def test_api_checks_the_same_options(runs):
    model = attnmt.load(runs["lstm"], device="cpu")
    with pytest.raises(UserError, match="beam 100000 is above the limit 1000"):
        model.translate([SRC[0]], beam=100000)
    with pytest.raises(UserError, match="unknown search option 'beams'"):
        model.translate([SRC[0]], beams=3)
    with pytest.raises(UserError, match="options must be a SearchOptions"):
        model.translate([SRC[0]], 5)
    best = model.translate([SRC[0], " "], SearchOptions(beam=2))  # blank lines: the Translator's rule
    direct = Translator.of(model.run).translate([SRC[0]], beam=2)
    assert best[1].text == "" and best[0].text == direct[0][0].text


# -- forced prefixes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lstm", "transformer", "ensemble"])
@pytest.mark.parametrize("settings", [{"beam": 1}, {"beam": 4, "nbest": 3}, {"sample": "topk=3", "seed": 5},
                                      {"beam": 3, "max_len_ratio": 0.1, "max_len_extra": 0}])
def test_a_prefix_is_always_kept(translators, name, settings):
    translator = translators[name]
    prefixes = ["el gato viejo vio", "", "Anna corre corre", "un"]
    results = translator.translate(SRC, prefixes=prefixes, at_cap="keep", **settings)
    for line, prefix, hyps in zip(SRC, prefixes, results):
        want = _pieces(translator, prefix)
        assert hyps, line
        for h in hyps:  # every hypothesis of the n-best list starts with the prefix
            assert h.tgt_pieces[: len(want)] == want, (prefix, h.tgt_pieces)
    free = translator.translate(SRC, at_cap="keep", **settings)
    assert results[1][0].text == free[1][0].text  # the line without a prefix searched as before


def test_a_prefix_scores_what_the_model_gives_it(translators):
    translator = translators["lstm"]
    (forced,) = translator.translate([SRC[0]], beam=1, prefixes=["el"], at_cap="keep")
    (free,) = translator.translate([SRC[0]], beam=1, at_cap="keep")
    if free[0].tgt_pieces[:1] == ["el"]:  # the model would have chosen it: the same output
        assert forced[0].text == free[0].text
    assert forced[0].score <= 0.0 and math.isfinite(forced[0].score)


# -- lexical constraints ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lstm", "transformer", "ensemble"])
@pytest.mark.parametrize("settings", [{"beam": 1}, {"beam": 4}, {"beam": 3, "nbest": 3, "stop": "complete"},
                                      {"beam": 2, "max_len_ratio": 0.1, "max_len_extra": 0}])
def test_constraints_always_appear(translators, name, settings):
    translator = translators[name]
    constraints = [["gato viejo"], ["corre", "Anna vio"], [], ["el perro", "un", "viejo gato"]]
    results = translator.translate(SRC, constraints=constraints, at_cap="keep", **settings)
    for phrases, hyps in zip(constraints, results):
        assert hyps
        for h in hyps:
            for phrase in phrases:
                assert _contains(h.tgt_pieces, _pieces(translator, phrase)), (phrase, h.tgt_pieces)
    free = translator.translate([SRC[2]], at_cap="keep", **settings)
    assert results[2][0].text == free[0][0].text  # a line without constraints keeps the fast path


def test_constraints_and_a_prefix_together(translators):
    translator = translators["transformer"]
    (hyps,) = translator.translate([SRC[1]], beam=3, prefixes=["Anna"], constraints=[["perro viejo"]],
                                   at_cap="keep", with_attention=True)
    pieces = hyps[0].tgt_pieces
    assert pieces[0] == "Anna" and _contains(pieces, ["perro", "viejo"])
    assert hyps[0].attention is not None and hyps[0].attention.shape[0] == len(pieces)


def test_constraint_and_prefix_errors_name_the_source(translators):
    translator = translators["lstm"]
    with pytest.raises(UserError, match=r"^c.txt:2: constraint 'zebra' has 'zebra', which the model's target"):
        translator.translate(SRC[:2], constraints=[[], ["zebra"]], constraint_source="c.txt")
    with pytest.raises(UserError, match=r"^p.txt:1: prefix '</s>' has"):
        translator.translate(SRC[:1], prefixes=["</s>"], prefix_source="p.txt")
    with pytest.raises(UserError, match="p.txt: 1 entries for 2 lines"):
        translator.translate(SRC[:2], prefixes=["el"], prefix_source="p.txt")
    with pytest.raises(UserError, match="constraints need beam search"):
        translator.translate(SRC[:1], constraints=[["el"]], sample="topk=2")


# -- sampling ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lstm", "transformer", "ensemble"])
def test_sampling_is_reproducible_and_differs_across_seeds(translators, name):
    translator = translators[name]
    lines = SRC

    def texts(**kw):
        return [h[0].text for h in translator.translate(lines, sample="topk=20", at_cap="keep",
                                                        batch_size=3, **kw)]

    first = texts(seed=1)
    assert texts(seed=1) == first
    assert texts(seed=1, workers=2) == first  # each batch draws from its own generator
    assert texts(seed=2) != first
    assert texts(seed=1, temperature=0.5) != first or texts(seed=3) != first


@pytest.mark.parametrize("name", ["lstm", "transformer", "ensemble"])
def test_top1_and_a_tiny_nucleus_are_greedy(translators, name):
    translator = translators[name]
    greedy = translator.translate(SRC, beam=1, at_cap="keep")
    for sample in ("topk=1", "topp=1e-9"):
        sampled = translator.translate(SRC, sample=sample, seed=7, temperature=3.0, at_cap="keep")
        assert [h[0].text for h in sampled] == [h[0].text for h in greedy]
        assert [h[0].score for h in sampled] == pytest.approx([h[0].score for h in greedy])


def test_sampling_without_a_seed_follows_torch_manual_seed(translators):
    translator = translators["lstm"]
    torch.manual_seed(11)
    a = [h[0].text for h in translator.translate(SRC, sample="topp=0.95", at_cap="keep")]
    torch.manual_seed(11)
    b = [h[0].text for h in translator.translate(SRC, sample="topp=0.95", at_cap="keep")]
    assert a == b


# -- the command and the server -------------------------------------------------------------------------
def test_translate_prefix_constraints_and_sample_files(tmp_path, runs, translators):
    src, prefix, cons = tmp_path / "in.txt", tmp_path / "prefix.txt", tmp_path / "cons.txt"
    src.write_text(f"{SRC[0]}\n\n{SRC[1]}\n", encoding="utf-8")
    prefix.write_text("el perro\nel\n\n", encoding="utf-8")
    cons.write_text("gato viejo\tAnna\n\ncorre\n", encoding="utf-8")
    base = ["translate", "--model", str(runs["lstm"]), "-i", str(src), "--max-len-ratio", "3"]
    status, out, err = run_cli([*base, "--prefix", str(prefix), "--constraints", str(cons), "--beam", "3"])
    assert status == 0, err
    first, blank, third = out.split("\n")[:3]
    assert first.startswith("el perro ") and "gato viejo" in first and "Anna" in first
    assert blank == "" and "corre" in third.split()
    status, out, err = run_cli([*base, "--sample", "topk=5", "--seed", "3", "--temperature", "0.7"])
    again = run_cli([*base, "--sample", "topk=5", "--seed", "3", "--temperature", "0.7"])[1]
    assert status == 0 and out == again and out.split("\n")[1] == ""
    short = tmp_path / "short.txt"
    short.write_text("el\n", encoding="utf-8")
    assert_fails(tmp_path, [*base, "--prefix", str(short)], (str(short), "1 lines, but the input has 3"))
    assert_fails(tmp_path, [*base, "--constraints", str(short)], (str(short), "1 lines, but the input has 3"))
    cons.write_text("gato\n\nzebra\n", encoding="utf-8")
    assert_fails(tmp_path, [*base, "--constraints", str(cons)], (f"{cons}:3:", "'zebra'"))
    cons.write_text("gato\n\n\n", encoding="utf-8")
    assert_fails(tmp_path, [*base, "--constraints", str(cons), "--sample", "topk=2"],
                 ("constraints need beam",))
    assert_fails(tmp_path, [*base, "--prefix", str(tmp_path / "missing")], ("missing", "not found"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # would block forever if opened: refused before
    assert_fails(tmp_path, [*base, "--constraints", str(fifo)], (str(fifo), "FIFO"))


def test_plain_lines_keep_the_plain_search(translators, monkeypatch):
    """No prefix, constraint or sample asked: beam_search itself, with no mask (the fast path)."""
    from attnmt.decode import search, translate

    def refuse(*args, **kwargs):
        raise AssertionError("a guided search ran for plain lines")

    seen = []
    real = search.beam_search

    def spy(*args, **kwargs):
        seen.append(kwargs.get("forced"))
        return real(*args, **kwargs)

    monkeypatch.setattr(translate, "constrained_beam_search", refuse)
    monkeypatch.setattr(translate, "sample", refuse)
    monkeypatch.setattr(translate, "beam_search", spy)
    out = translators["lstm"].translate(SRC, beam=3, at_cap="keep",
                                        constraints=[[], [], [], []], prefixes=["", "", "", ""])
    assert len(out) == len(SRC) and seen == [None]


def test_serve_takes_prefix_constraints_and_sample(runs):
    from fastapi.testclient import TestClient

    from attnmt.serve.app import create_app, load_models

    served = load_models([str(runs["lstm"])], device="cpu", float32=True)
    with TestClient(create_app(served), base_url="http://localhost") as c:
        r = c.post("/translate", json={"sentences": [SRC[0], SRC[1]], "beam": 3, "max_len_ratio": 3.0,
                                       "prefix": ["el perro", ""], "constraints": [["Anna"], ["gato viejo"]]})
        assert r.status_code == 200, r.text
        first, second = (t["text"] for t in r.json()["translations"])
        assert first.startswith("el perro") and "Anna" in first.split() and "gato viejo" in second
        body = {"sentences": SRC, "sample": "topk=10", "seed": 4}
        a, b = c.post("/translate", json=body).json(), c.post("/translate", json=body).json()
        assert [t["text"] for t in a["translations"]] == [t["text"] for t in b["translations"]]
        for bad, words in [
            ({"beam": 1, "max_len_ratio": 1e-300}, "max_len_ratio 1e-300 is below the minimum 0.1"),
            ({"sample": "topk=0"}, "sample topk=0"),
            ({"sample": "topk=2", "temperature": 1e9}, "temperature 1e+09 is above the limit"),
            ({"prefix": ["el"]}, "prefix: 1 entries for 4 sentences"),
            ({"prefix": ["", "zebra", "", ""]}, "prefix[1]: prefix 'zebra'"),
            ({"constraints": [["el"], [], [], []], "sample": "topk=2"}, "constraints need beam search"),
        ]:
            r = c.post("/translate", json={"sentences": SRC, **bad})
            assert r.status_code == 422 and words in r.json()["error"], (bad, r.text)
