"""The HTTP translation service: ``POST /translate``, ``GET /models``, ``GET /health`` and a web page.

    attnmt serve --model RUN [--model NAME=RUN2 ...] --host 127.0.0.1 --port 8000

Requests to the same model with the same decoding options are batched across clients
(attnmt/serve/batcher.py). Every error, whatever its cause, answers with a JSON body
``{"error": "one-line message", "detail": ...}``; the server never dies of a bad request:

    400 malformed JSON / bad Content-Length / Host header not allowed (attnmt/serve/guards.py)
    404 unknown model            413 body, sentence count, sentence or worst-case answer too large
    422 wrong types (strict: no bool→int, no string→bool), NaN/Infinity, lone surrogates, empty
        list or model name, option values out of range
    503 too many sentences or answer bytes already in flight (retry later)
    504 not translated within --request-timeout seconds

The OpenAPI schema is at ``/openapi.json``; the interactive docs at ``/docs`` load their scripts
from a CDN and are off unless ``--docs`` is given.
"""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnmt.decode.guides import Guides
from attnmt.decode.options import BATCH_LIMIT, SearchOptions
from attnmt.decode.translate import Translation, Translator, check_precision_flags
from attnmt.errors import UserError
from attnmt.serve.batcher import Job, ModelBatcher, QueueFull
from attnmt.serve.budget import MAX_OUTPUT_PIECES, Ask, Budget, response_bound, widest_piece
from attnmt.serve.guards import (
    LOOPBACK_HOSTS,
    BodyLimit,
    HostCheck,
    StrictJSONRoute,
    error_response,
)

STATIC = Path(__file__).parent / "static"
DEFAULTS = SearchOptions()


@dataclass
class Limits:
    max_sentences: int = 64  # per request
    max_tokens: int = 200  # source pieces per sentence
    max_chars: int = 4000  # characters per sentence (bounds tokenisation work)
    max_beam: int = 16
    max_body_bytes: int = 1 << 20
    max_batch: int = 32  # sentences per decoder call
    max_wait_ms: float = 5.0  # how long the first request of a batch waits for company; 0 = off
    max_queue: int = 2048  # sentences waiting per model before 503
    max_response_bytes: int = 4 << 20  # worst-case JSON answer of one request (attnmt/serve/budget.py)
    max_pending_bytes: int = 32 << 20  # worst-case answers of all requests in flight, together
    request_timeout: float = 60.0  # seconds from arrival to answer; 504 after


@dataclass
class ServedModel:
    name: str
    translator: Translator
    run_dir: str
    checkpoint: str
    piece_bytes: int = 0  # most bytes one target piece adds to the answer (budget.widest_piece)
    precision: str = "float32"  # of the search products, "bf16" or "float32": set_search_precision
    # what every request starts from: the server's precision, the budget's length cap; an output
    # cut at the cap fails its own request only (never the others batched with it)
    options: SearchOptions = field(default_factory=lambda: SearchOptions(
        max_len_cap=MAX_OUTPUT_PIECES, at_cap="keep"))

    def __post_init__(self):
        if not self.piece_bytes:
            self.piece_bytes = widest_piece(self.translator.tgt_tok)


def parse_model_spec(spec: str) -> tuple[str, str]:
    """``NAME=RUN`` or ``RUN`` (named after the directory's basename)."""
    name, sep, run = spec.partition("=")
    if not sep:
        run = spec
        name = Path(spec.rstrip("/")).name
    if not name or not run:
        raise UserError(f"--model expects RUN or NAME=RUN, got {spec!r}")
    return name, run


def load_models(
    specs: list[str],
    checkpoint: str = "best",
    device: str = "auto",
    int8: bool = False,
    bf16: bool = False,
    float32: bool = False,
) -> list[ServedModel]:
    """``int8``: every model's search output layer as an 8-bit product (`translate --int8`).
    The search precision is chosen as ``attnmt translate`` chooses it (``set_search_precision``):
    bfloat16 by default on a CPU with bfloat16 units, ``bf16``/``float32`` force one."""
    check_precision_flags(bf16, float32)
    precision = "bf16" if bf16 else "float32" if float32 else "auto"
    base = SearchOptions(max_len_cap=MAX_OUTPUT_PIECES, at_cap="keep", precision=precision, int8=int8)
    models: list[ServedModel] = []
    for spec in specs:
        name, run = parse_model_spec(spec)
        if any(m.name == name for m in models):
            raise UserError(f"two models are named {name!r}; use NAME=RUN to tell them apart")
        translator = Translator.from_run(run, checkpoint, device)
        if translator.cfg.task != "translate":
            raise UserError(f"a {translator.cfg.task!r} model cannot translate", run)
        chosen = translator.prepare(base)  # int8 and precision, as attnmt translate sets them
        models.append(ServedModel(name, translator, str(run), checkpoint, precision=chosen, options=base))
    if not models:
        raise UserError("give at least one --model RUN")
    return models


# -- request and response bodies (these make the OpenAPI schema) ---------------------------------
class TranslateRequest(BaseModel):
    # strict: JSON types only (no true → 1, no "yes" → true, no "5" → 5)
    model_config = ConfigDict(extra="forbid", strict=True)

    sentences: list[str] = Field(description="source sentences, one per item")
    model: str | None = Field(
        None, min_length=1, description="model name from GET /models (default: the first)"
    )
    # the defaults are SearchOptions()'s, as on the command line and in Python (decode/options.py)
    beam: int = Field(DEFAULTS.beam, description="beam size; 1 = greedy search")
    nbest: int = Field(DEFAULTS.nbest, description="hypotheses per sentence (at most beam); the first "
                       "is the translation nbest 1 gives")
    length_penalty: float = Field(DEFAULTS.length_penalty, description="rank by log p / length^alpha")
    max_len_ratio: float = Field(DEFAULTS.max_len_ratio, description="output length limit per source token")
    attention: bool = Field(
        False, description="return the attention matrix (target × source pieces)"
    )
    alignment: bool = Field(False, description="return word alignments (source word, target word)")
    prefix: list[str] | None = Field(
        None, description="per sentence, target text its translation starts with (\"\" for none)"
    )
    constraints: list[list[str]] | None = Field(
        None, description="per sentence, target phrases its translation must contain"
    )
    sample: str | None = Field(
        None, description="topk=K or topp=P: sample each translation instead of beam search"
    )
    temperature: float = Field(DEFAULTS.temperature, description="with sample: softmax(logits / temperature)")
    seed: int | None = Field(None, description="with sample: random seed (reproducible outputs)")


SEARCH_FIELDS = ("beam", "nbest", "length_penalty", "max_len_ratio", "sample", "temperature", "seed")


class Line(NamedTuple):
    """One sentence of a request as the batcher carries it."""

    text: str
    prefix: str
    constraints: list[str]


class HypothesisResult(BaseModel):
    text: str
    score: float | None  # null when the model gave no finite score
    src_words: list[str] | None = None
    tgt_words: list[str] | None = None
    alignment: list[tuple[int, int]] | None = None  # (source word, target word), 0-based
    pharaoh: str | None = None
    src_pieces: list[str] | None = None
    tgt_pieces: list[str] | None = None
    src_word_of_piece: list[int] | None = None
    tgt_word_of_piece: list[int] | None = None
    attention: list[list[float]] | None = None  # (len(tgt_pieces), len(src_pieces))


class SentenceResult(BaseModel):
    source: str
    text: str
    score: float | None
    hypotheses: list[HypothesisResult]


class TranslateResponse(BaseModel):
    model: str
    translations: list[SentenceResult]
    batch_sentences: int = Field(
        description="sentences decoded in the same call (dynamic batching)"
    )
    precision: str = Field(description="of the search products: bf16 or float32")
    time_ms: float


class ModelInfo(BaseModel):
    name: str
    run: str
    checkpoint: str
    src: str
    tgt: str
    tokenizer: str
    type: str = Field(description="model family: lstm or transformer")
    description: str = Field(description="the architecture in words, as the web page shows it")
    layers: int
    hidden: int
    attention: str
    score: str
    has_attention: bool
    device: str
    precision: str = Field(description="of the search products: bf16 or float32")
    max_beam: int = Field(description="the largest beam (and n-best) a request may ask for")


def describe_model(cfg) -> str:
    """A run's architecture in a line: "Transformer, 2 layers, d 64, 4 heads, feed-forward 256,
    pre-norm, sinusoidal positions" or "LSTM, 2 × 64, global attention (general), input feeding"."""
    m = cfg.model
    if m.type == "transformer":
        text = (f"Transformer, {m.layers} layer{'s' if m.layers != 1 else ''}, d {m.hidden}, {m.heads} heads, "
                f"feed-forward {m.ff}, {m.norm}-norm, {m.positions} positions")
        kinds = {"encoder self": m.enc_self_attention, "decoder self": m.dec_self_attention,
                 "cross": m.cross_attention}
        variants = [f"{kind}-attention {v}" for kind, v in kinds.items() if v != "standard"]
        return text + "".join(f", {v}" for v in variants)
    text = f"LSTM, {m.layers} × {m.hidden}{', bidirectional encoder' if m.bidirectional else ''}"
    if m.attention == "none":
        return text + ", no attention"
    text += f", {m.attention} attention ({m.score})"
    if m.attention.startswith("local"):
        text += f", window {m.window}"
    return text + (", input feeding" if m.input_feed else "")


# -- errors --------------------------------------------------------------------------------------
def _validation_message(errors: list[dict]) -> tuple[int, str]:
    for err in errors:
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx", {}).get("error", "")
            return 400, f"malformed JSON{': ' + str(ctx) if ctx else ''}"
    parts = []
    for err in errors[:5]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return 422, "; ".join(parts)


# -- results -------------------------------------------------------------------------------------
def _score(value: float) -> float | None:
    return round(float(value), 6) if math.isfinite(value) else None


def _hypothesis(source: str, t: Translation, attention: bool, alignment: bool) -> HypothesisResult:
    h = HypothesisResult(text=t.text, score=_score(t.score))
    if (attention or alignment) and t.attention is not None:
        h.src_words, h.tgt_words = source.split(), t.text.split()
        h.alignment = [(int(i), int(j)) for i, j in t.alignment]
        h.pharaoh = t.pharaoh()
    if attention and t.attention is not None:
        h.src_pieces, h.tgt_pieces = t.src_pieces, t.tgt_pieces
        h.src_word_of_piece, h.tgt_word_of_piece = t.src_word_of_piece, t.tgt_word_of_piece
        # nan_to_num: a non-finite weight would make the answer invalid JSON
        weights = t.attention.float().nan_to_num(0.0, 1.0, 0.0).clamp(0.0, 1.0).tolist()
        h.attention = [[round(x, 4) for x in row] for row in weights]
    return h


def _decode_fn(translator: Translator):
    """What a model's worker thread runs for one batch of ``Line``s (the Translator skips blank
    lines; jobs are batched by equal SearchOptions, whatever their prefixes and constraints)."""

    def run(lines: list[Line], options: SearchOptions) -> list[list[Translation]]:
        texts = [line.text for line in lines]
        prefixes = [line.prefix for line in lines] if any(line.prefix for line in lines) else None
        constraints = [line.constraints for line in lines] if any(line.constraints for line in lines) else None
        return translator.translate(texts, options, prefixes=prefixes, constraints=constraints)

    return run


class Checked(NamedTuple):
    """A request that passed ``check_request``: its worst-case answer size, options and lines."""

    bound: int
    options: SearchOptions
    lines: list[Line]


def _request_options(req: TranslateRequest, served: ServedModel, limits: Limits) -> SearchOptions:
    """The request's SearchOptions, validated by decode/options.py (422 naming the field)."""
    if not 1 <= req.beam <= limits.max_beam:  # the server's own limit, below the search's
        raise HTTPException(422, f"beam: must be between 1 and {limits.max_beam}, got {req.beam}")
    # only what the request sets changes the server's options, so a setting that does nothing
    # (beam with sample, temperature without it) is refused as on the command line
    given = {name: getattr(req, name) for name in SEARCH_FIELDS if name in req.model_fields_set}
    try:
        return served.options.with_(
            with_attention=req.attention or req.alignment,
            batch_size=min(limits.max_batch, BATCH_LIMIT), **given,
        )
    except UserError as err:
        raise HTTPException(422, str(err)) from None


def _check_guides(req: TranslateRequest, served: ServedModel, options: SearchOptions,
                  limits: Limits) -> Guides:
    """Prefixes and constraints: one entry per sentence, within the sentence limits, every piece
    known (all checked here, so a bad request never fails the others batched with it)."""
    for field_name, given in (("prefix", req.prefix), ("constraints", req.constraints)):
        if given is not None and len(given) != len(req.sentences):
            raise HTTPException(422, f"{field_name}: {len(given)} entries for {len(req.sentences)} "
                                "sentences; give one per sentence (empty for none)")
        for i, entry in enumerate(given or []):
            texts = [entry] if isinstance(entry, str) else entry
            if len(texts) > limits.max_tokens or sum(len(t) for t in texts) > limits.max_chars:
                raise HTTPException(413, f"{field_name}[{i}]: over the limit of {limits.max_tokens} "
                                    f"phrases or {limits.max_chars} characters per sentence")
    try:
        _, guides = served.translator.guides(req.sentences, options, req.prefix, req.constraints,
                                             "prefix", "constraints", numbered=False)
    except UserError as err:
        raise HTTPException(422, str(err)) from None
    for i in range(len(req.sentences)):
        if guides.floor(i) - 1 > 2 * limits.max_tokens:
            raise HTTPException(413, f"prefix/constraints of sentence {i}: {guides.floor(i) - 1} "
                                f"pieces; the limit is {2 * limits.max_tokens}")
    return guides


def check_request(req: TranslateRequest, served: ServedModel, limits: Limits) -> Checked:
    """Every user-fixable problem of a request, as an HTTPException with a clear message.
    Returns the most bytes its answer can take (attnmt/serve/budget.py), its options and lines."""
    if not req.sentences:
        raise HTTPException(422, "sentences: the list is empty; send at least one sentence")
    if len(req.sentences) > limits.max_sentences:
        raise HTTPException(
            413,
            f"sentences: {len(req.sentences)} sentences in one request; "
            f"the limit is {limits.max_sentences}",
        )
    options = _request_options(req, served, limits)
    tok = served.translator.src_tok
    pieces = []
    for i, line in enumerate(req.sentences):
        if len(line) > limits.max_chars:
            raise HTTPException(
                413,
                f"sentences[{i}]: {len(line)} characters; the limit is "
                f"{limits.max_chars} characters per sentence",
            )
        # whitespace words are a lower bound on pieces: reject megabyte lines without tokenising
        n = len(line.split())
        if n <= limits.max_tokens:  # split as the translator will (its tokenizer lower-cases)
            pieces.append(tok.split(line) if line.strip() else [])
            n = len(pieces[-1])
        if n > limits.max_tokens:
            raise HTTPException(
                413,
                f"sentences[{i}]: {n} tokens; the limit is {limits.max_tokens} tokens per sentence",
            )
    guides = _check_guides(req, served, options, limits)
    ask = Ask(req.nbest, req.max_len_ratio, req.attention, req.alignment)
    floors = [guides.floor(i) for i in range(len(req.sentences))]
    bound = response_bound(req.sentences, pieces, ask, served.piece_bytes, served.name, floors)
    if bound > limits.max_response_bytes:
        raise HTTPException(
            413,
            f"the answer could take {bound} bytes, over the limit of {limits.max_response_bytes}; "
            "ask for fewer sentences or n-best hypotheses, a lower max_len_ratio, or no attention",
        )
    lines = [Line(text, (req.prefix or [""] * len(req.sentences))[i],
                  (req.constraints or [[]] * len(req.sentences))[i]) for i, text in enumerate(req.sentences)]
    return Checked(bound, options, lines)


# -- the application -----------------------------------------------------------------------------
async def _wait(job: Job, request: Request, timeout: float) -> list | None:
    """The job's results, or None when the client went away first. A job whose request ended
    (timeout, disconnect, cancellation) is cancelled, so the worker drops it if it still waits."""
    future = asyncio.wrap_future(job.future)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise HTTPException(
                    504, f"not translated within the server's limit of {timeout:g} s; retry later"
                )
            done, _ = await asyncio.wait({future}, timeout=min(left, 0.25))
            if done:
                return future.result()
            if await request.is_disconnected():
                return None
    finally:
        job.future.cancel()  # no effect once the worker has started or finished the job


def create_app(
    models: list[ServedModel],
    limits: Limits | None = None,
    allowed_hosts: tuple[str, ...] | list[str] = LOOPBACK_HOSTS,
    docs: bool = False,
) -> FastAPI:
    """The ASGI app. ``allowed_hosts``: names the ``Host`` header may carry (``*``: any);
    ``docs``: serve FastAPI's interactive docs at ``/docs`` (their scripts come from a CDN)."""
    limits = limits or Limits()
    by_name = {m.name: m for m in models}
    batchers = {
        m.name: ModelBatcher(
            _decode_fn(m.translator),
            limits.max_batch,
            limits.max_wait_ms / 1000.0,
            limits.max_queue,
            m.name,
        )
        for m in models
    }
    budget = Budget(limits.max_pending_bytes)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        for b in batchers.values():
            b.close()

    app = FastAPI(
        title="attnmt",
        version="0.1.0",
        lifespan=lifespan,
        description="Attention-based neural machine translation with attention maps.",
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    app.router.route_class = StrictJSONRoute
    app.state.batchers = batchers
    app.state.budget = budget
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    app.add_middleware(HostCheck, allowed=tuple(allowed_hosts))  # outermost: checked first

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError):
        status, message = _validation_message(list(exc.errors()))
        return error_response(status, message, exc.errors())

    @app.exception_handler(StarletteHTTPException)  # also the router's own 404 and 405
    async def on_http_error(request: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)  # anything else: still a JSON body (the server logs it)
    async def on_crash(request: Request, exc: Exception):
        return error_response(500, f"internal error: {type(exc).__name__}")

    @app.get("/health")
    async def health() -> dict:
        return {
            "status": "ok",
            "models": list(by_name),
            "batching": {n: b.batching for n, b in batchers.items()},
        }

    @app.get("/models", response_model=list[ModelInfo])
    async def list_models() -> list[ModelInfo]:
        infos = []
        for m in models:
            cfg = m.translator.cfg
            infos.append(
                ModelInfo(
                    name=m.name,
                    run=Path(m.run_dir).name,
                    checkpoint=m.checkpoint,
                    src=cfg.data.src,
                    tgt=cfg.data.tgt,
                    tokenizer=cfg.data.tokenizer,
                    type=cfg.model.type,
                    description=describe_model(cfg),
                    layers=cfg.model.layers,
                    hidden=cfg.model.hidden,
                    # an LSTM's attention and score; a Transformer's cross-attention variant
                    attention=getattr(cfg.model, "attention", None) or cfg.model.cross_attention,
                    score=getattr(cfg.model, "score", "scaled-dot"),
                    has_attention=bool(getattr(m.translator.model, "has_attention", False)),
                    device=str(m.translator.device),
                    precision=m.precision,
                    max_beam=limits.max_beam,
                )
            )
        return infos

    @app.post(
        "/translate",
        response_model=TranslateResponse,
        response_model_exclude_none=True,
        responses={
            400: {"description": "malformed JSON"},
            404: {"description": "unknown model"},
            413: {"description": "too many or too long sentences, body or answer too large"},
            422: {"description": "invalid request"},
            503: {"description": "queue or answer budget full; retry later"},
            504: {"description": "not translated within the request timeout"},
        },
    )
    async def translate(req: TranslateRequest, request: Request) -> Response:
        start = time.perf_counter()
        name = req.model or models[0].name
        served = by_name.get(name)
        if served is None:
            raise HTTPException(404, f"unknown model {name!r}; loaded: {', '.join(by_name)}")
        checked = check_request(req, served, limits)
        if not budget.take(checked.bound):
            raise HTTPException(
                503, "server busy: too many large answers in flight; retry later"
            )
        try:
            return await _answer(req, request, served, checked, start)
        finally:
            budget.give(checked.bound)

    async def _answer(req, request, served, checked: Checked, start: float) -> Response:
        bound = checked.bound
        try:
            job = batchers[served.name].submit(checked.lines, checked.options)
        except QueueFull as err:
            raise HTTPException(503, f"server busy: {err}; retry later") from None
        try:
            results = await _wait(job, request, limits.request_timeout)
        except (HTTPException, asyncio.CancelledError):
            raise
        except UserError as err:
            raise HTTPException(422, str(err)) from None
        # a model failure answers this request only; the worker lives on
        except Exception as err:  # noqa: BLE001
            raise HTTPException(500, f"translation failed: {type(err).__name__}: {err}") from None
        if results is None:  # the client is gone; nobody reads this
            return error_response(499, "client closed the request")
        cut = next((i for i, hyps in enumerate(results) if hyps and hyps[0].cut), None)
        if cut is not None:  # a cut output is no translation (SearchOptions.at_cap)
            raise HTTPException(422, f"sentences[{cut}]: the translation was cut at the server's "
                                f"cap of {checked.options.max_len_cap} pieces; lower max_len_ratio "
                                "or split the sentence")
        out = []
        for source, hyps in zip(req.sentences, results):
            hs = [_hypothesis(source, h, req.attention, req.alignment) for h in hyps]
            best = hs[0] if hs else HypothesisResult(text="", score=0.0)
            out.append(
                SentenceResult(source=source, text=best.text, score=best.score, hypotheses=hs)
            )
        body = TranslateResponse(
            model=served.name,
            translations=out,
            batch_sentences=job.batch_sentences,
            precision=next((h.precision for hyps in results for h in hyps if h.precision), served.precision),
            time_ms=round((time.perf_counter() - start) * 1000, 2),
        ).model_dump_json(exclude_none=True).encode("utf-8")
        if len(body) > bound:  # the budget's arithmetic is wrong: never send more than it said
            raise HTTPException(500, f"answer of {len(body)} bytes over its bound of {bound}")
        return Response(body, media_type="application/json")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
