"""The HTTP service: good requests, every class of bad request (4xx with a message), dynamic
batching, the OpenAPI schema, the static page and the CLI's start-up errors."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from fastapi.testclient import TestClient

from attnmt.cli.main import main
from attnmt.errors import UserError
from attnmt.serve.app import STATIC, Limits, create_app, load_models, parse_model_spec
from attnmt.serve.batcher import ModelBatcher, QueueFull

LIMITS = Limits(
    max_sentences=8, max_tokens=12, max_chars=1000, max_beam=6, max_body_bytes=4096, max_wait_ms=30
)


@pytest.fixture(scope="module")
def served(tiny_run):
    # module scope: conftest's float32 patch is not active yet, so ask for float32
    return load_models([str(tiny_run), f"second={tiny_run}"], device="cpu", float32=True)


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served, LIMITS), base_url="http://127.0.0.1") as c:
        yield c


def test_health_and_models(client, tiny_run):
    assert client.get("/health").json()["models"] == [tiny_run.name, "second"]
    models = client.get("/models").json()
    assert [m["name"] for m in models] == [tiny_run.name, "second"]
    assert models[0]["hidden"] == 32 and models[0]["has_attention"] is True
    assert models[0]["src"] == "en" and models[0]["tgt"] == "es"
    assert models[0]["precision"] == "float32"


def test_translate_matches_the_translator(client, served):
    sentences = ["the red cat sees a dog", "", "a girl has the old book"]
    r = client.post("/translate", json={"sentences": sentences, "beam": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == served[0].name
    assert [t["source"] for t in body["translations"]] == sentences
    blank = body["translations"][1]
    assert blank["text"] == "" and blank["hypotheses"] == []
    direct = served[0].translator.translate([sentences[0], sentences[2]], beam=3)
    got = [body["translations"][0], body["translations"][2]]
    for g, d in zip(got, direct):
        assert g["text"] == d[0].text and g["text"]
        assert g["score"] == pytest.approx(d[0].score, abs=1e-5)
        assert "attention" not in g["hypotheses"][0]  # only on request


def test_nbest_and_model_choice(client):
    r = client.post(
        "/translate",
        json={"sentences": ["a boy finds the table"], "model": "second", "beam": 4, "nbest": 3},
    )
    assert r.status_code == 200, r.text
    hyps = r.json()["translations"][0]["hypotheses"]
    assert r.json()["model"] == "second"
    assert len(hyps) == 3
    scores = [h["score"] for h in hyps]
    assert scores == sorted(scores, reverse=True)
    assert len({h["text"] for h in hyps}) == 3


def test_attention_and_alignment(client):
    src = "the big dog sees a small flower"
    r = client.post("/translate", json={"sentences": [src], "beam": 2, "attention": True})
    h = r.json()["translations"][0]["hypotheses"][0]
    attn = h["attention"]
    assert len(attn) == len(h["tgt_pieces"]) and all(
        len(row) == len(h["src_pieces"]) for row in attn
    )
    for row in attn:  # a softmax over the source pieces
        assert sum(row) == pytest.approx(1.0, abs=2e-3)
        assert min(row) >= 0
    assert h["src_words"] == src.split() and h["tgt_words"] == h["text"].split()
    assert len(h["src_word_of_piece"]) == len(h["src_pieces"])
    assert len(h["tgt_word_of_piece"]) == len(h["tgt_pieces"])
    assert {j for _, j in h["alignment"]} == set(range(len(h["tgt_words"])))
    assert all(0 <= i < len(h["src_words"]) for i, _ in h["alignment"])
    assert h["pharaoh"] == " ".join(f"{i}-{j}" for i, j in h["alignment"])
    # alignment alone: no matrices
    r = client.post("/translate", json={"sentences": [src], "alignment": True})
    h2 = r.json()["translations"][0]["hypotheses"][0]
    assert "attention" not in h2 and h2["alignment"]


BAD = [
    # (description, request kwargs, status, words the message must contain)
    (
        "malformed JSON",
        {"content": b'{"sentences": ["a cat"', "headers": {"content-type": "application/json"}},
        400,
        "malformed JSON",
    ),
    ("not an object", {"json": ["a cat"]}, 422, "body"),
    ("missing field", {"json": {"beam": 2}}, 422, "sentences"),
    ("wrong type", {"json": {"sentences": "a cat"}}, 422, "sentences"),
    ("unknown field", {"json": {"sentences": ["a cat"], "beems": 2}}, 422, "beems"),
    ("empty list", {"json": {"sentences": []}}, 422, "empty"),
    ("too many sentences", {"json": {"sentences": ["a cat"] * 9}}, 413, "limit is 8"),
    (
        "sentence too long",
        {"json": {"sentences": ["a cat", "the dog " * 7]}},
        413,
        "sentences[1]: 14 tokens",
    ),
    ("huge word", {"json": {"sentences": ["x" * 3000]}}, 413, "3000 characters; the limit is 1000"),
    ("body too large", {"json": {"sentences": ["cat " * 2000]}}, 413, "4096 bytes"),
    (
        "unknown model",
        {"json": {"sentences": ["a cat"], "model": "nope"}},
        404,
        "unknown model 'nope'",
    ),
    ("beam too large", {"json": {"sentences": ["a cat"], "beam": 7}}, 422, "beam"),
    ("nbest over beam", {"json": {"sentences": ["a cat"], "beam": 2, "nbest": 3}}, 422, "nbest"),
    ("bad ratio", {"json": {"sentences": ["a cat"], "max_len_ratio": 0}}, 422, "max_len_ratio"),
]


@pytest.mark.parametrize("what,kwargs,status,words", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_4xx_with_a_message(client, what, kwargs, status, words):
    r = client.post("/translate", **kwargs)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]
    assert "\n" not in r.json()["error"]


def test_chunked_body_over_the_limit(client):
    def chunks():
        for _ in range(10):
            yield b"x" * 1000

    r = client.post("/translate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "bytes" in r.json()["error"]


def test_unknown_routes_and_methods_get_json_errors(client):
    r = client.get("/nope")
    assert r.status_code == 404 and r.json()["error"] == "Not Found"
    r = client.get("/translate")
    assert r.status_code == 405 and r.json()["error"]


def test_a_failing_model_answers_500_and_keeps_serving(tiny_run):
    (served,) = load_models([str(tiny_run)], device="cpu")
    real, calls = served.translator.translate, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("out of memory")
        return real(*args, **kwargs)

    served.translator.translate = flaky
    with TestClient(create_app([served], Limits(max_wait_ms=0)), base_url="http://localhost") as c:
        r = c.post("/translate", json={"sentences": ["a cat"]})
        assert r.status_code == 500 and "RuntimeError: out of memory" in r.json()["error"]
        r = c.post("/translate", json={"sentences": ["a cat"]})
        assert r.status_code == 200 and r.json()["translations"][0]["text"]


def test_still_serving_after_bad_requests(client):
    for _ in range(3):
        client.post("/translate", content=b"\xff\xfe", headers={"content-type": "application/json"})
    r = client.post("/translate", json={"sentences": ["a cat"]})
    assert r.status_code == 200 and r.json()["translations"][0]["text"]


def test_concurrent_requests_share_batches_and_get_their_own_results(served):
    app = create_app(served, Limits(max_wait_ms=200, max_batch=16))
    sentences = [
        "the cat sees a dog",
        "a girl has the book",
        "the old house",
        "a red flower",
        "the boy wants a table",
        "a small cat finds the big dog",
    ]
    expected = [t[0].text for t in served[0].translator.translate(sentences, beam=2)]

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            rs = await asyncio.gather(
                *(c.post("/translate", json={"sentences": [s], "beam": 2}) for s in sentences)
            )
        return [r.json() for r in rs]

    bodies = asyncio.run(go())
    for app_batcher in app.state.batchers.values():
        app_batcher.close()
    assert [b["translations"][0]["text"] for b in bodies] == expected
    assert max(b["batch_sentences"] for b in bodies) > 1  # requests were decoded together
    stats = app.state.batchers[served[0].name].stats
    assert stats["jobs"] == len(sentences) and stats["calls"] < len(sentences)


# -- the batcher on its own (a fake model that records its calls) -----------------------------------
def _fake(calls: list):
    def run(sentences, options):
        calls.append((list(sentences), options))
        time.sleep(0.01)
        return [f"{s.upper()}/{options[0]}" for s in sentences]

    return run


def _submit_concurrently(batcher, items):
    jobs = [None] * len(items)

    def go(i, sentences, options):
        jobs[i] = batcher.submit(sentences, options)

    threads = [threading.Thread(target=go, args=(i, s, o)) for i, (s, o) in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [j.future.result(timeout=10) for j in jobs]


def test_batcher_groups_by_options_and_respects_max_batch():
    calls: list = []
    b = ModelBatcher(_fake(calls), max_batch=4, max_wait=0.3)
    items = [([f"s{i}"], (1 if i % 2 else 2,)) for i in range(10)]
    results = _submit_concurrently(b, items)
    b.close()
    assert results == [[f"S{i}/{1 if i % 2 else 2}"] for i in range(10)]
    assert all(len(s) <= 4 for s, _ in calls)
    # a call only holds sentences whose request asked for its options
    assert all((1 if int(x[1:]) % 2 else 2) == o[0] for s, o in calls for x in s)
    assert len(calls) < 10  # batched
    assert sum(len(s) for s, _ in calls) == 10


def test_batcher_off_decodes_each_job_alone():
    calls: list = []
    b = ModelBatcher(_fake(calls), max_batch=4, max_wait=0.0)
    results = _submit_concurrently(b, [([f"s{i}", "x"], (1,)) for i in range(5)])
    b.close()
    assert results == [[f"S{i}/1", "X/1"] for i in range(5)]
    assert len(calls) == 5 and not b.batching


def test_batcher_survives_a_failing_batch_and_bounds_its_queue():
    state = {"fail": True}

    def flaky(sentences, options):
        if state["fail"]:
            state["fail"] = False
            raise ValueError("boom")
        return sentences

    b = ModelBatcher(flaky, max_batch=2, max_wait=0.0, max_queue=3)
    with pytest.raises(ValueError, match="boom"):
        b.submit(["a"], ()).future.result(timeout=10)
    assert b.submit(["b"], ()).future.result(timeout=10) == ["b"]
    gate = threading.Event()
    b.translate = lambda s, o: (gate.wait(10), s)[1]
    first = b.submit(["c"], ())
    time.sleep(0.1)  # the worker holds "c"; the queue is empty again
    queued = b.submit(["d", "e"], ())
    with pytest.raises(QueueFull):
        b.submit(["f", "g"], ())
    gate.set()
    assert first.future.result(timeout=10) == ["c"] and queued.future.result(timeout=10) == [
        "d",
        "e",
    ]
    b.close()


# -- schema, page, command line -------------------------------------------------------------------
def test_openapi_schema(client):
    schema = client.get("/openapi.json").json()
    assert {"/translate", "/models", "/health"} <= set(schema["paths"])
    props = schema["components"]["schemas"]["TranslateRequest"]["properties"]
    assert {"sentences", "model", "beam", "nbest", "attention", "alignment"} <= set(props)


def test_page_and_static_files_are_served_and_offline(client):
    page = client.get("/")
    assert page.status_code == 200 and 'id="heatmap"' in page.text
    for name in ("app.js", "style.css"):
        r = client.get(f"/static/{name}")
        assert r.status_code == 200 and len(r.text) > 200
    for f in Path(STATIC).iterdir():  # nothing loaded from the network
        text = f.read_text(encoding="utf-8")
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, f


def test_model_specs_and_startup_errors(tiny_run, tmp_path, capsys):
    assert parse_model_spec("a/b/run1/") == ("run1", "a/b/run1/")
    assert parse_model_spec("fr=x/run") == ("fr", "x/run")
    with pytest.raises(UserError, match="two models are named"):
        load_models([str(tiny_run), str(tiny_run)], device="cpu")
    assert main(["serve", "--model", str(tmp_path / "missing"), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnmt: error:") and "no such run directory" in err and "\n" not in err
    assert main(["serve", "--model", str(tiny_run), "--max-batch", "0"]) == 2
    assert "--max-batch" in capsys.readouterr().err
    assert main(["serve", "--model", str(tiny_run), "--bf16", "--float32"]) == 2
    assert "exclude each other" in capsys.readouterr().err


def test_serve_searches_as_translate_does(tiny_run, tmp_path, monkeypatch):
    """On a CPU with bfloat16 units both commands search in bfloat16 unless --float32."""
    from attnmt.kernels import packed

    monkeypatch.setattr(packed, "native_bf16", lambda: True)
    sentences = ["the red cat sees a dog", "a girl has the old book"]
    source, hyp = tmp_path / "src.en", tmp_path / "hyp.es"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(tiny_run), "--input", str(source), "--output",
                 str(hyp), "--beam", "3"]) == 0
    (served,) = load_models([str(tiny_run)], device="cpu")
    assert served.precision == "bf16" and served.translator.model.decoder.bf16_search
    with TestClient(create_app([served], Limits(max_wait_ms=0)), base_url="http://localhost") as c:
        assert c.get("/models").json()[0]["precision"] == "bf16"
        r = c.post("/translate", json={"sentences": sentences, "beam": 3})
    want = hyp.read_text(encoding="utf-8").splitlines()
    assert [t["text"] for t in r.json()["translations"]] == want
    (kept,) = load_models([str(tiny_run)], device="cpu", float32=True)
    assert kept.precision == "float32" and not kept.translator.model.decoder.bf16_search
