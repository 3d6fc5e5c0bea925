"""One search policy, three doors: ``attnmt translate``, ``attnmt.load(...).translate`` and
``attnmt serve`` start from the same ``SearchOptions()`` (precision included), translate the same
input identically and say which precision they searched in; n-best lists keep the 1-best; the
API takes a str as one line and passes ``raw_weights`` on (issue 58, items 1, 2, 5, 6)."""

from __future__ import annotations

import warnings

import pytest
import torch

import attnmt
from attnmt.cli.main import main
from attnmt.decode.options import SearchOptions
from attnmt.data.vocab import BOS
from attnmt.decode.search import beam_search
from attnmt.decode.translate import Translator
from attnmt.eval.nbest import read_nbest
from attnmt.kernels import packed
from attnmt.runs.checkpoint import EMA_FILE, save_checkpoint, state_dict_for_saving
from attnmt.runs.loader import load_run

from analysis_fixtures import make_run

SOURCES = ["the red cat sees a dog", "a girl has the old book", "", "the small white house wants a table",
           "a boy finds the big red flower"]


def _write(path, lines) -> str:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("bf16", [False, True], ids=["float32-cpu", "bf16-cpu"])
def test_cli_api_and_server_translate_alike_and_say_their_precision(tiny_run, tmp_path, capsys,
                                                                     monkeypatch, bf16):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from attnmt.serve.app import create_app, load_models

    # a CPU with bfloat16 units or not (conftest makes every test a CPU without): the default
    # "auto" precision must come out the same through every door
    monkeypatch.setattr(packed, "native_bf16", lambda: bf16)
    want = "bf16" if bf16 else "float32"
    src = _write(tmp_path / "in.en", SOURCES)
    assert main(["translate", "--model", str(tiny_run), "-i", src, "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    cli = captured.out.splitlines()
    assert f"attnmt: search precision {want}" in captured.err

    api = attnmt.load(tiny_run, device="cpu").translate(SOURCES)
    assert [t.text for t in api] == cli
    assert {t.precision for t in api} == {want}

    with TestClient(create_app(load_models([str(tiny_run)], device="cpu")), base_url="http://127.0.0.1") as client:
        body = client.post("/translate", json={"sentences": SOURCES}).json()
        assert client.get("/models").json()[0]["precision"] == want
    assert [t["text"] for t in body["translations"]] == cli
    assert body["precision"] == want


def test_a_score_after_a_translation_is_the_float32_score(tmp_path, monkeypatch):
    """The search's default bfloat16 products (a Transformer's maps) do not stay on for
    ``score``: it gives what ``attnmt score`` (a fresh load) gives."""
    monkeypatch.setattr(packed, "native_bf16", lambda: True)
    run = make_run(tmp_path, "tf", ["model.type=transformer", "model.heads=2", "model.ff=32"])
    texts, sources = ["el perro corre", "un gato vio el perro"], ["the dog runs", "a cat saw the dog"]
    fresh = attnmt.load(run, device="cpu").score(texts, sources=sources)
    model = attnmt.load(run, device="cpu")
    assert model.translate(sources)[0].precision == "bf16"
    assert model.score(texts, sources=sources) == fresh
    assert model.translate(sources)[0].precision == "bf16"  # and the next search is bfloat16 again


def test_the_defaults_are_one_object():
    from attnmt.cli.translate import SEARCH
    from attnmt.serve.app import TranslateRequest

    assert SEARCH == SearchOptions() and SearchOptions().precision == "auto"
    fields = TranslateRequest.model_fields
    for name in ("beam", "nbest", "length_penalty", "max_len_ratio", "temperature"):
        assert fields[name].default == getattr(SearchOptions(), name), name


class EarlyEnd:
    """A stub decoder: after <s>, </s> is the likeliest token (0.4) though "4 </s>" scores higher
    per token, (ln 0.35 + ln 0.9) / 2 > ln 0.4; after any other token </s> has 0.9. Beam search
    with stop "best" ends at once with the empty output; a search that goes on finds "4"."""

    def encode(self, src, src_lengths):
        return torch.zeros(src.size(0), 1)

    def init_state(self, enc):
        return enc.clone()

    def step(self, prefix, state, enc, need_weights=False):
        start = torch.tensor([1e-6, 1e-6, 1e-6, 0.4, 0.35, 0.15, 0.1 - 3e-6])
        later = torch.tensor([1e-6, 1e-6, 1e-6, 0.9, 0.04, 0.03, 0.03 - 3e-6])
        rows = torch.where((prefix[:, -1] == BOS).unsqueeze(1), start, later)
        return rows.log(), state, None


def test_nbest_keeps_the_one_best_of_plain_beam_search(tiny_run, tiny_corpus):
    """The n-best list's first entry is what nbest=1 returns under stop "best" (n-best used to
    wait for more finished hypotheses and re-rank them, changing the 1-best); the rest follow
    best first. In plain and constrained beam search, on a trained run too."""
    src, lengths = torch.full((2, 3), 5), torch.tensor([3, 3])
    one = beam_search(EarlyEnd(), src, lengths, 4, 1, 1.0, stop="best")
    three = beam_search(EarlyEnd(), src, lengths, 4, 3, 1.0, stop="best")
    assert [h[0].tokens for h in one] == [[], []]
    assert [[x.tokens for x in h] for h in three] == [[[], [4], [5]]] * 2
    assert [h[0].tokens for h in beam_search(EarlyEnd(), src, lengths, 4, 3, 1.0, stop="complete")] == [[4], [4]]

    lines = (tiny_corpus.directory / "dev.en").read_text(encoding="utf-8").splitlines()
    translator = Translator.of(load_run(tiny_run, device="cpu"))
    for extra in ({}, {"constraints": [["el"]] * len(lines)}):
        one = translator.translate(lines, beam=5, at_cap="keep", **extra)
        five = translator.translate(lines, beam=5, nbest=5, at_cap="keep", **extra)
        assert [h[0].text for h in five] == [h[0].text for h in one]
        assert all(len(h) == 5 for h in five)
        assert all(a.score >= b.score for h in five for a, b in zip(h[1:], h[2:]))


def test_translate_nbest_first_entries_are_the_plain_output(tiny_run, tmp_path, capsys):
    src = _write(tmp_path / "in.en", SOURCES)
    assert main(["translate", "--model", str(tiny_run), "-i", src, "--device", "cpu", "--beam", "5"]) == 0
    plain = capsys.readouterr().out.splitlines()
    nbest = tmp_path / "n.txt"
    assert main(["translate", "--model", str(tiny_run), "-i", src, "--device", "cpu", "--beam", "5",
                 "--nbest", "5", "-o", str(nbest)]) == 0
    groups = read_nbest(nbest, len(SOURCES))
    assert [g[0].text if g else "" for g in groups] == plain
    assert nbest.read_text().splitlines()[0].startswith("1 ||| ")  # 1-based, as scores' "line"


def test_api_nbest_returns_every_hypothesis_and_a_str_is_one_line(tiny_run):
    model = attnmt.load(tiny_run, device="cpu")
    lists = model.translate(SOURCES, nbest=3)
    assert [len(h) for h in lists] == [3, 3, 0, 3, 3]
    best = model.translate(SOURCES)
    assert [h[0].text for h in lists if h] == [t.text for t in best if t.text]
    (one,) = model.translate(SOURCES[0])  # not one line per character
    assert one.text == best[0].text
    assert model.translate(SOURCES[0], prefix="el")[0].tgt_pieces[0] == "el"
    with pytest.raises(attnmt.errors.UserError, match="lines must be a string or a list of strings"):
        model.translate(42)


def test_load_passes_raw_weights_on(tmp_path, capsys):
    run = make_run(tmp_path, "ema")
    loaded = load_run(run, device="cpu")
    averaged = {k: v + 1.0 for k, v in state_dict_for_saving(loaded.model).items()}
    save_checkpoint(run, 2, loaded.model, None, best=True, extra_weights={EMA_FILE: averaged})
    assert attnmt.load(run, device="cpu").run.weights == EMA_FILE
    assert attnmt.load(run, device="cpu", raw_weights=True).run.weights == "model.safetensors"

    plain = make_run(tmp_path, "plain")
    with pytest.warns(UserWarning, match=r"raw_weights=True\) has no effect: .*plain has no EMA weights"):
        attnmt.load(plain, device="cpu", raw_weights=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attnmt.load(plain, device="cpu")  # nothing asked, nothing said
    src = _write(tmp_path / "in.en", ["the dog runs"])
    assert main(["translate", "--model", str(plain), "-i", src, "--device", "cpu", "--raw-weights"]) == 0
    err = capsys.readouterr().err
    assert "attnmt: warning: --raw-weights" in err and "no EMA weights" in err
