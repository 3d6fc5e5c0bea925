"""The web page in a real headless Chromium against a real uvicorn on 127.0.0.1.

Needs Debian's ``chromium`` package and the ``playwright`` Python package (which drives the system
browser through ``executable_path``; no browser download). Skipped only when either is missing.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time

import pytest

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
if CHROMIUM is None:
    pytest.skip("Chromium is not installed (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
uvicorn = pytest.importorskip("uvicorn")

from attnmt.serve.app import Limits, create_app, load_models


@pytest.fixture(scope="module")
def server_url(tiny_run, tmp_path_factory):
    from analysis_fixtures import make_run

    transformer = make_run(tmp_path_factory.mktemp("tf"), "tf", ["model.type=transformer", "model.heads=2",
                                                                 "model.ff=32", "model.layers=2"])
    # module scope: conftest's float32 patch is not active yet, so ask for float32
    models = load_models([str(tiny_run), f"second={tiny_run}", f"tf={transformer}"], device="cpu",
                         float32=True)
    app = create_app(models, Limits(max_wait_ms=2))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # a free port, held from here on
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.fixture(scope="module")
def page(server_url):
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        page = browser.new_page(viewport={"width": 1100, "height": 800})
        page.errors = []
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
        page.goto(server_url + "/")
        yield page
        browser.close()


def test_translate_and_heatmap(page, tmp_path):
    page.wait_for_function("document.querySelectorAll('#model option').length === 3")
    assert page.locator("#model option").all_inner_texts()[1].startswith("second")
    assert page.locator("#model-info").inner_text().startswith("LSTM, 1 × 32, global attention (general)")
    page.fill("#source", "the red cat sees a dog")
    page.click("#translate")
    page.wait_for_selector("#heatmap td.cell", timeout=30_000)

    translation = page.locator("#translations li").first.inner_text()
    assert "score" in translation and len(translation.split("score")[0].strip()) > 0
    n_src = page.locator("#heatmap thead th").count() - 1
    n_tgt = page.locator("#heatmap tbody tr").count()
    assert n_src == 6 and n_tgt >= 1
    assert page.locator("#heatmap td.cell").count() == n_src * n_tgt
    assert page.locator("#src-words .w").all_inner_texts() == [
        "the",
        "red",
        "cat",
        "sees",
        "a",
        "dog",
    ]

    # hovering a target word lights up source words (background ∝ attention) and its heatmap rows
    page.hover("#tgt-words .w >> nth=0")
    lit = page.eval_on_selector_all("#src-words .w", "els => els.map(e => e.style.background)")
    assert sum(bool(x) for x in lit) == 6 and any("rgba" in x for x in lit)
    assert page.locator("#tgt-words .w.active").count() == 1
    assert page.locator("#heatmap tbody th.active").count() >= 1
    assert page.locator("#heatmap td.dim").count() > 0

    shot = tmp_path / "attnmt-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    assert page.errors == []


def test_switch_model_and_show_errors(page):
    page.fill("#source", "")
    page.click("#translate")
    assert "Type a sentence" in page.locator("#error").inner_text()
    page.select_option("#model", "second")
    page.fill("#source", "a girl has the book\nthe old dog")
    page.click("#translate")
    page.wait_for_function("document.querySelectorAll('#translations li').length === 2")
    assert page.locator("#status").inner_text().startswith("second:")
    assert page.locator("#error").is_hidden()
    page.locator("#translations li").nth(1).click()
    assert page.locator("#src-words .w").all_inner_texts() == ["the", "old", "dog"]
    page.fill("#source", " ".join(["cat"] * 300))  # over the server's token limit: a 413 shown
    page.click("#translate")
    page.wait_for_selector("#error:not([hidden])")
    assert (
        "413" in page.locator("#error").inner_text()
        and "limit" in page.locator("#error").inner_text()
    )
    expected = "the server responded with a status of 413"  # the browser logs every 4xx
    assert [e for e in page.errors if expected not in e] == []


def test_real_architecture_nbest_prefix_and_constraints(page, tmp_path):
    """The page describes the model /models describes (a Transformer is no "LSTM") and offers
    n-best lists, a forced start and phrases that must appear, as the HTTP API does; the
    screenshot (printed path) shows the Transformer's description and the n-best list."""
    page.errors.clear()  # the test before left its expected 413
    page.select_option("#model", "tf")
    info = page.locator("#model-info").inner_text()
    assert info.startswith("Transformer, 2 layers, d 16, 2 heads, feed-forward 32, pre-norm") and "LSTM" not in info
    page.select_option("#model", "second")
    assert page.locator("#model-info").inner_text().startswith("LSTM")
    page.fill("#source", "the red cat sees a dog\na girl has the old book")
    page.fill("#beam", "4")
    page.fill("#nbest", "3")
    page.click("#translate")
    page.wait_for_function("document.querySelectorAll('#translations li.hyp').length === 6")
    first = page.locator("#translations > li").first
    hyps = first.locator("li.hyp").all_inner_texts()
    assert len(hyps) == 3 and hyps[0].split(" score")[0] == first.inner_text().split(" score")[0]
    first.locator("li.hyp").nth(1).click()  # another hypothesis: its own attention
    assert page.locator("#translations li.hyp.selected").count() == 1
    assert page.locator("#tgt-words .w").all_inner_texts() == hyps[1].split(" score")[0].split()

    page.fill("#nbest", "1")
    page.fill("#prefix", "un perro")
    page.fill("#constraints", "casa ; rojo")
    page.click("#translate")
    page.wait_for_function("document.querySelector('#status').innerText.includes('ms')"
                           " && document.querySelectorAll('#translations > li').length === 2"
                           " && !document.querySelector('#translate').disabled")
    for text in page.locator("#translations > li").all_inner_texts():
        words = text.split(" score")[0].split()
        assert words[:2] == ["un", "perro"] and "casa" in words and "rojo" in words, words
    page.fill("#prefix", "un\nel\nla")  # three lines for two sentences: said, nothing sent
    page.click("#translate")
    assert "Starts with: 3 lines for 2 sentences" in page.locator("#error").inner_text()
    page.fill("#prefix", "")
    page.fill("#constraints", "")

    page.select_option("#model", "tf")
    page.fill("#source", "the red cat sees a dog")
    page.fill("#nbest", "2")
    page.click("#translate")
    page.wait_for_function("document.querySelectorAll('#translations li.hyp').length === 2")
    shot = tmp_path / "attnmt-page-nbest.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    assert page.errors == []
