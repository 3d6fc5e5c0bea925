"""The server half of the malformed-input zoo (the command-line half: tests/test_bad_input.py).

Each probe an attacker or a careless client can send gets a JSON error body with one line, and the
server keeps answering: answers bounded before decoding (413/503), NaN/Infinity/huge numbers and
lone surrogates (422), strict types, cancelled and timed-out jobs that leave the worker alive, the
Host allow-list, /docs off, a crash inside a handler. One real uvicorn checks the keep-alive
connection and the Host header as a browser would send them.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from fastapi.testclient import TestClient

from attnmt.cli.main import main
from attnmt.serve.app import Limits, create_app, load_models
from attnmt.serve.batcher import ModelBatcher
from attnmt.serve.budget import Ask, Budget, response_bound

LIMITS = Limits(max_sentences=8, max_tokens=12, max_chars=1000, max_beam=6, max_body_bytes=16384,
                max_wait_ms=0)


@pytest.fixture(scope="module")
def served(tiny_run):
    # module scope: conftest's float32 patch is not active yet, so ask for float32
    return load_models([str(tiny_run)], device="cpu", float32=True)


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served, LIMITS), base_url="http://127.0.0.1") as c:
        yield c


def _post(client, raw: bytes | str, **kw):
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return client.post("/translate", content=data, headers={"content-type": "application/json"}, **kw)


def _json_error(r, status: int, *words: str) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = json.loads(r.text)  # strict JSON: no NaN
    assert isinstance(body["error"], str) and "\n" not in body["error"] and body["error"]
    json.dumps(body, allow_nan=False)
    for w in words:
        assert w in body["error"], (w, body["error"])
    return body


def _ok(client):
    r = client.post("/translate", json={"sentences": ["a cat"]})
    assert r.status_code == 200 and r.json()["translations"][0]["text"], r.text


# -- numbers and text that JSON cannot carry: 422, the server lives on ------------------------------
NON_JSON = [
    ("beam NaN", '{"sentences": ["a cat"], "beam": NaN}', "NaN"),
    ("beam Infinity", '{"sentences": ["a cat"], "beam": Infinity}', "Infinity"),
    ("penalty -Infinity", '{"sentences": ["a cat"], "length_penalty": -Infinity}', "Infinity"),
    ("beam 1e400", '{"sentences": ["a cat"], "beam": 1e400}', "out of range"),
    ("ratio 1e400", '{"sentences": ["a cat"], "max_len_ratio": 1e400}', "out of range"),
    ("sentence NaN", '{"sentences": [NaN]}', "NaN"),
    ("lone surrogate", '{"sentences": ["a \\ud800 cat"]}', "sentences[0]: invalid Unicode"),
    ("lone low surrogate", '{"sentences": ["ok", "\\udc80"]}', "sentences[1]: invalid Unicode"),
    ("surrogate model name", '{"sentences": ["a"], "model": "\\ud83d"}', "model: invalid Unicode"),
    ("surrogate key", '{"sentences": ["a"], "\\ud800": 1}', "invalid Unicode"),
]


@pytest.mark.parametrize("what,raw,words", NON_JSON, ids=[c[0] for c in NON_JSON])
def test_numbers_and_text_json_cannot_carry_are_422(client, what, raw, words):
    _json_error(_post(client, raw), 422, words)
    _ok(client)


STRICT = [
    ("beam true", {"sentences": ["a cat"], "beam": True}, "beam"),
    ("beam 2.0", {"sentences": ["a cat"], "beam": 2.0}, "beam"),
    ("beam '2'", {"sentences": ["a cat"], "beam": "2"}, "beam"),
    ("attention 'yes'", {"sentences": ["a cat"], "attention": "yes"}, "attention"),
    ("alignment 1", {"sentences": ["a cat"], "alignment": 1}, "alignment"),
    ("empty model name", {"sentences": ["a cat"], "model": ""}, "model"),
    ("model not a string", {"sentences": ["a cat"], "model": 3}, "model"),
    ("sentence not a string", {"sentences": ["a cat", 5]}, "sentences.1"),
    ("nested list", {"sentences": [["a cat"]]}, "sentences.0"),
    ("null sentences", {"sentences": None}, "sentences"),
    ("negative nbest", {"sentences": ["a"], "nbest": -1}, "nbest"),
    ("huge beam", {"sentences": ["a"], "beam": 10**30}, "beam"),
    ("negative ratio", {"sentences": ["a"], "max_len_ratio": -1}, "max_len_ratio"),
    ("huge penalty", {"sentences": ["a"], "length_penalty": 1e300}, "length_penalty"),
]


@pytest.mark.parametrize("what,body,words", STRICT, ids=[c[0] for c in STRICT])
def test_strict_types_no_coercion(client, what, body, words):
    _json_error(client.post("/translate", json=body), 422, words)


def test_ints_are_fine_where_floats_are_expected(client):
    r = client.post("/translate", json={"sentences": ["a cat"], "length_penalty": 1, "max_len_ratio": 2})
    assert r.status_code == 200, r.text


PARSE = [
    ("not UTF-8", b'{"sentences": ["\xff"]}', 400, "malformed JSON"),
    ("UTF-16", '{"sentences": ["a"]}'.encode("utf-16"), 400, "malformed JSON"),
    ("trailing garbage", b'{"sentences": ["a"]} x', 400, "malformed JSON"),
    ("deep nesting", b"[" * 5000 + b"]" * 5000, 400, ""),
    ("a 5000-digit number", b'{"sentences": ["a"], "beam": ' + b"9" * 5000 + b"}", 400, ""),
    ("empty body", b"", 422, "body"),
]


@pytest.mark.parametrize("what,raw,status,words", PARSE, ids=[c[0] for c in PARSE])
def test_unparseable_bodies(client, what, raw, status, words):
    _json_error(_post(client, raw), status, words)
    _ok(client)


# -- the answer is bounded before decoding --------------------------------------------------------
def test_a_small_request_cannot_ask_for_a_huge_answer(served):
    # the probe: beam 16, nbest 16, attention, max_len_ratio 10, 200-token sentences
    body = {"sentences": ["cat " * 200] * 4, "beam": 16, "nbest": 16, "attention": True,
            "max_len_ratio": 10}
    assert len(json.dumps(body)) < 4000
    with TestClient(create_app(served), base_url="http://localhost") as c:
        r = c.post("/translate", json=body)
        err = _json_error(r, 413, "the answer could take", "bytes, over the limit of 4194304")
        assert "no attention" in err["error"]
        body.update(beam=2, nbest=1, attention=False)  # the same sentences without matrices: fine
        r = c.post("/translate", json=body)
        assert r.status_code == 200 and len(r.content) < 4 << 20


@pytest.mark.parametrize("options", [
    {"beam": 4, "nbest": 4, "attention": True, "max_len_ratio": 10},
    {"beam": 3, "nbest": 2, "alignment": True},
    {"beam": 1, "attention": True, "alignment": True, "max_len_ratio": 0.1},
])
def test_every_answer_is_within_its_bound(client, served, options):
    sentences = ["the red cat sees a dog", "", "a girl has the old book .", "\u00e9t\u00e9 \"quoted\" \\ x"]
    r = client.post("/translate", json={"sentences": sentences, **options})
    assert r.status_code == 200, r.text  # the server answers 500 if an answer outgrows its bound
    pieces = [served[0].translator.src_tok.split(s) if s.strip() else [] for s in sentences]
    ask = Ask(options.get("nbest", 1), options.get("max_len_ratio", 2.0),
              options.get("attention", False), options.get("alignment", False))
    bound = response_bound(sentences, pieces, ask, served[0].piece_bytes, served[0].name)
    assert len(r.content) <= bound


def test_answers_in_flight_share_one_budget(tiny_run):
    (served,) = load_models([str(tiny_run)], device="cpu")
    gate, real = threading.Event(), served.translator.translate

    def slow(*args, **kwargs):
        gate.wait(10)
        return real(*args, **kwargs)

    served.translator.translate = slow
    one = {"sentences": ["the cat sees a dog"] * 2, "attention": True}
    pieces = [served.translator.src_tok.split(s) for s in one["sentences"]]
    bound = response_bound(one["sentences"], pieces, Ask(1, 2.0, True, False), served.piece_bytes,
                           served.name)
    app = create_app([served], Limits(max_wait_ms=0, max_response_bytes=bound,
                                      max_pending_bytes=bound + bound // 2))

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            first = asyncio.create_task(c.post("/translate", json=one))
            await asyncio.sleep(0.3)  # the first holds its bound while it decodes
            assert app.state.budget.used == bound
            second = await c.post("/translate", json=one)
            gate.set()
            return await first, second

    first, second = asyncio.run(go())
    app.state.batchers[served.name].close()
    assert first.status_code == 200, first.text
    _json_error(second, 503, "server busy", "retry later")
    assert app.state.budget.used == 0


def test_budget_accounting():
    b = Budget(100)
    assert b.take(60) and not b.take(50) and b.take(40)
    b.give(60)
    b.give(40)
    assert b.used == 0 and b.take(100)


# -- cancelled, timed-out and abandoned jobs --------------------------------------------------------
def test_a_cancelled_job_is_dropped_and_the_worker_lives_on():
    calls, gate = [], threading.Event()

    def run(sentences, options):
        calls.append(list(sentences))
        gate.wait(10)
        return [s.upper() for s in sentences]

    b = ModelBatcher(run, max_batch=4, max_wait=0.0)
    first = b.submit(["a"], ())
    time.sleep(0.1)  # the worker holds "a"
    abandoned = b.submit(["b"], ())
    assert abandoned.future.cancel()
    assert not first.future.cancel()  # a running job cannot be cancelled, so its result is set
    later = b.submit(["c"], ())
    gate.set()
    assert first.future.result(timeout=10) == ["A"]
    assert later.future.result(timeout=10) == ["C"]
    assert calls == [["a"], ["c"]] and b.stats["dropped"] == 1
    assert b._thread.is_alive()
    b.close()


def test_a_job_cancelled_while_it_runs_does_not_kill_the_worker():
    gate = threading.Event()
    b = ModelBatcher(lambda s, o: (gate.wait(10), s)[1], max_batch=4, max_wait=0.0)
    job = b.submit(["a"], ())
    time.sleep(0.1)
    job.future.set_result(["settled elsewhere"])  # whatever settles the future first wins
    gate.set()
    assert b.submit(["b"], ()).future.result(timeout=10) == ["b"]
    b.close()


def test_timeout_answers_504_and_abandoned_work_is_dropped(tiny_run):
    (served,) = load_models([str(tiny_run)], device="cpu")
    real, seen = served.translator.translate, []

    def slow(lines, *args, **kwargs):
        seen.append(list(lines))
        if lines == ["the slow one"]:
            time.sleep(1.0)
        return real(lines, *args, **kwargs)

    served.translator.translate = slow
    app = create_app([served], Limits(max_wait_ms=0, request_timeout=0.4))

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            slow_r = asyncio.create_task(c.post("/translate", json={"sentences": ["the slow one"]}))
            await asyncio.sleep(0.05)
            queued = await c.post("/translate", json={"sentences": ["never decoded"]})
            return await slow_r, queued

    slow_r, queued = asyncio.run(go())
    _json_error(slow_r, 504, "not translated within", "0.4 s")
    _json_error(queued, 504, "not translated within")
    batcher = app.state.batchers[served.name]
    deadline = time.monotonic() + 10
    while batcher.stats["calls"] < 1 and time.monotonic() < deadline:  # the slow decode ends
        time.sleep(0.05)
    with TestClient(app, base_url="http://localhost") as c:
        _ok(c)
    assert ["never decoded"] not in seen and batcher.stats["dropped"] == 1
    batcher.close()


# -- Host header, docs, crashes -----------------------------------------------------------------------
def test_host_allow_list(served):
    app = create_app(served, LIMITS)
    for base in ("http://localhost:8000", "http://127.0.0.1", "http://[::1]:8000"):
        with TestClient(app, base_url=base) as c:
            assert c.get("/health").status_code == 200, base
    with TestClient(app, base_url="http://attacker.example") as c:
        _json_error(c.get("/health"), 400, "Host header", "attacker.example", "--allow-host")
        _json_error(c.post("/translate", json={"sentences": ["a cat"]}), 400, "Host header")
    custom = create_app(served, LIMITS, allowed_hosts=["mt.example"])
    with TestClient(custom, base_url="http://MT.example:8000") as c:
        assert c.get("/health").status_code == 200
    with TestClient(custom, base_url="http://localhost") as c:
        _json_error(c.get("/health"), 400, "Host header")
    with TestClient(create_app(served, LIMITS, allowed_hosts=["*"]), base_url="http://any.example") as c:
        assert c.get("/health").status_code == 200


def test_docs_are_off_unless_asked(served):
    with TestClient(create_app(served, LIMITS), base_url="http://localhost") as c:
        _json_error(c.get("/docs"), 404, "Not Found")
        _json_error(c.get("/redoc"), 404, "Not Found")
        assert "/translate" in c.get("/openapi.json").json()["paths"]
    with TestClient(create_app(served, LIMITS, docs=True), base_url="http://localhost") as c:
        assert c.get("/docs").status_code == 200


def test_a_crash_in_a_handler_still_answers_json(tiny_run, monkeypatch):
    import attnmt.serve.app as app_module

    (served,) = load_models([str(tiny_run)], device="cpu")

    def broken(*args, **kwargs):
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(app_module, "_hypothesis", broken)
    app = create_app([served], Limits(max_wait_ms=0))
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as c:
        _json_error(c.post("/translate", json={"sentences": ["a cat"]}), 500, "ZeroDivisionError")
        assert c.get("/health").status_code == 200


def test_serve_flags_are_checked(tiny_run, capsys):
    for flags, words in [
        (["--request-timeout", "0"], "--request-timeout"),
        (["--request-timeout", "nan"], "--request-timeout"),
        (["--max-wait-ms", "inf"], "--max-wait-ms"),
        (["--max-response-bytes", "0"], "--max-response-bytes"),
        (["--max-response-bytes", "100", "--max-pending-bytes", "10"], "--max-pending-bytes"),
    ]:
        assert main(["serve", "--model", str(tiny_run), *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("attnmt: error:") and words in err and "\n" not in err


# -- a real server: one keep-alive connection, a browser's Host header --------------------------------
@pytest.fixture(scope="module")
def real_server(served):
    uvicorn = pytest.importorskip("uvicorn")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(served, LIMITS), log_level="critical"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield port
    server.should_exit = True
    thread.join(10)
    sock.close()


def test_keep_alive_connection_survives_bad_requests(real_server):
    conn = http.client.HTTPConnection("127.0.0.1", real_server, timeout=30)
    bad = [b'{"sentences": ["a"], "beam": NaN}', b'{"sentences": ["\\ud800"]}', b'{"beam": true}',
           b'{"sentences": ["a"], "beam": 1e400}', b"{"]
    for body in bad + [b'{"sentences": ["a cat"]}']:
        conn.request("POST", "/translate", body, {"content-type": "application/json"})
        r = conn.getresponse()
        data = json.loads(r.read())
        assert r.getheader("content-type").startswith("application/json")
        assert (r.status == 200) == (body == b'{"sentences": ["a cat"]}'), (body, r.status, data)
    assert data["translations"][0]["text"]
    conn.close()


def test_foreign_host_header_is_refused_by_the_real_server(real_server):
    conn = http.client.HTTPConnection("127.0.0.1", real_server, timeout=30)
    conn.request("GET", "/health", headers={"Host": f"rebind.attacker.example:{real_server}"})
    r = conn.getresponse()
    assert r.status == 400 and "Host header" in json.loads(r.read())["error"]
    conn.request("GET", "/health")  # http.client sends Host: 127.0.0.1:PORT
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["status"] == "ok"
    conn.close()
