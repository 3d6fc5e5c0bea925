"""The HTTP translation service: ``POST /translate``, ``GET /models``, ``GET /health`` and a web page.

    attnmt serve --model RUN [--model NAME=RUN2 ...] --host 127.0.0.1 --port 8000

Requests to the same model with the same decoding options are batched across clients
(attnmt/serve/batcher.py). Every limit the server enforces answers with a 4xx status and a JSON
body ``{"error": "one-line message", "detail": ...}``; the server never dies of a bad request:

    400 malformed JSON / bad Content-Length     413 body, sentence count or sentence too long
    404 unknown model                           422 wrong types, empty list, bad option values
    503 too many sentences already queued (retry later)

The OpenAPI schema is at ``/openapi.json`` (interactive docs at ``/docs``).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnmt.decode.translate import Translation, Translator
from attnmt.errors import UserError
from attnmt.serve.batcher import ModelBatcher, QueueFull

STATIC = Path(__file__).parent / "static"


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


@dataclass
class ServedModel:
    name: str
    translator: Translator
    run_dir: str
    checkpoint: str


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
    specs: list[str], checkpoint: str = "best", device: str = "auto"
) -> list[ServedModel]:
    models: list[ServedModel] = []
    for spec in specs:
        name, run = parse_model_spec(spec)
        if any(m.name == name for m in models):
            raise UserError(f"two models are named {name!r}; use NAME=RUN to tell them apart")
        translator = Translator.from_run(run, checkpoint, device)
        if translator.cfg.task != "translate":
            raise UserError(f"a {translator.cfg.task!r} model cannot translate", run)
        models.append(ServedModel(name, translator, str(run), checkpoint))
    if not models:
        raise UserError("give at least one --model RUN")
    return models


# -- request and response bodies (these make the OpenAPI schema) ---------------------------------
class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sentences: list[str] = Field(description="source sentences, one per item")
    model: str | None = Field(None, description="model name from GET /models (default: the first)")
    beam: int = Field(5, description="beam size; 1 = greedy search")
    nbest: int = Field(1, description="hypotheses per sentence (at most beam)")
    length_penalty: float = Field(1.0, description="rank by log p / length^alpha")
    max_len_ratio: float = Field(2.0, description="output length limit per source token")
    attention: bool = Field(
        False, description="return the attention matrix (target × source pieces)"
    )
    alignment: bool = Field(False, description="return word alignments (source word, target word)")


class HypothesisResult(BaseModel):
    text: str
    score: float
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
    score: float
    hypotheses: list[HypothesisResult]


class TranslateResponse(BaseModel):
    model: str
    translations: list[SentenceResult]
    batch_sentences: int = Field(
        description="sentences decoded in the same call (dynamic batching)"
    )
    time_ms: float


class ModelInfo(BaseModel):
    name: str
    run: str
    checkpoint: str
    src: str
    tgt: str
    tokenizer: str
    layers: int
    hidden: int
    attention: str
    score: str
    has_attention: bool
    device: str


# -- errors --------------------------------------------------------------------------------------
def _error(status: int, message: str, detail=None) -> JSONResponse:
    return JSONResponse(
        {"error": message, "detail": detail if detail is not None else message}, status
    )


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


class BodyLimit:
    """Reject request bodies over ``limit`` bytes with 413 before the app parses them (also for
    chunked uploads that carry no Content-Length)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                return await _error(400, "bad Content-Length header")(scope, receive, send)
            if size > self.limit:
                return await self._too_large(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                return await self._too_large(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send):
        response = _error(413, f"request body is larger than the limit of {self.limit} bytes")
        await response(scope, receive, send)


# -- results -------------------------------------------------------------------------------------
def _hypothesis(source: str, t: Translation, attention: bool, alignment: bool) -> HypothesisResult:
    h = HypothesisResult(text=t.text, score=round(float(t.score), 6))
    if (attention or alignment) and t.attention is not None:
        h.src_words, h.tgt_words = source.split(), t.text.split()
        h.alignment = [(int(i), int(j)) for i, j in t.alignment]
        h.pharaoh = t.pharaoh()
    if attention and t.attention is not None:
        h.src_pieces, h.tgt_pieces = t.src_pieces, t.tgt_pieces
        h.src_word_of_piece, h.tgt_word_of_piece = t.src_word_of_piece, t.tgt_word_of_piece
        h.attention = [[round(float(x), 4) for x in row] for row in t.attention.tolist()]
    return h


def _decode_fn(translator: Translator, max_batch: int):
    """What a model's worker thread runs for one batch; blank lines are not decoded."""

    def run(sentences: list[str], options: tuple) -> list[list[Translation]]:
        beam, nbest, length_penalty, max_len_ratio, with_attention = options
        keep = [i for i, s in enumerate(sentences) if s.strip()]
        out: list[list[Translation]] = [[] for _ in sentences]
        if keep:
            results = translator.translate(
                [sentences[i] for i in keep],
                beam=beam,
                nbest=nbest,
                batch_size=max_batch,
                length_penalty=length_penalty,
                max_len_ratio=max_len_ratio,
                with_attention=with_attention,
            )
            for i, r in zip(keep, results):
                out[i] = r
        return out

    return run


def check_request(req: TranslateRequest, served: ServedModel, limits: Limits) -> None:
    """Every user-fixable problem of a request, as an HTTPException with a clear message."""
    if not req.sentences:
        raise HTTPException(422, "sentences: the list is empty; send at least one sentence")
    if len(req.sentences) > limits.max_sentences:
        raise HTTPException(
            413,
            f"sentences: {len(req.sentences)} sentences in one request; "
            f"the limit is {limits.max_sentences}",
        )
    if not 1 <= req.beam <= limits.max_beam:
        raise HTTPException(422, f"beam: must be between 1 and {limits.max_beam}, got {req.beam}")
    if not 1 <= req.nbest <= req.beam:
        raise HTTPException(422, f"nbest: must be between 1 and beam ({req.beam}), got {req.nbest}")
    if not 0.0 <= req.length_penalty <= 5.0:
        raise HTTPException(
            422, f"length_penalty: must be between 0 and 5, got {req.length_penalty}"
        )
    if not 0.1 <= req.max_len_ratio <= 10.0:
        raise HTTPException(
            422, f"max_len_ratio: must be between 0.1 and 10, got {req.max_len_ratio}"
        )
    tok = served.translator.src_tok
    for i, line in enumerate(req.sentences):
        if len(line) > limits.max_chars:
            raise HTTPException(
                413,
                f"sentences[{i}]: {len(line)} characters; the limit is "
                f"{limits.max_chars} characters per sentence",
            )
        # whitespace words are a lower bound on pieces: reject megabyte lines without tokenising
        n = len(line.split())
        if n <= limits.max_tokens:
            n = len(tok.split(line)) if line.strip() else 0
        if n > limits.max_tokens:
            raise HTTPException(
                413,
                f"sentences[{i}]: {n} tokens; the limit is {limits.max_tokens} tokens per sentence",
            )


# -- the application -----------------------------------------------------------------------------
def create_app(models: list[ServedModel], limits: Limits | None = None) -> FastAPI:
    limits = limits or Limits()
    by_name = {m.name: m for m in models}
    batchers = {
        m.name: ModelBatcher(
            _decode_fn(m.translator, limits.max_batch),
            limits.max_batch,
            limits.max_wait_ms / 1000.0,
            limits.max_queue,
            m.name,
        )
        for m in models
    }

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
    )
    app.state.batchers = batchers
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError):
        status, message = _validation_message(list(exc.errors()))
        return _error(status, message, jsonable(exc.errors()))

    @app.exception_handler(StarletteHTTPException)  # also the router's own 404 and 405
    async def on_http_error(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail))

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
                    layers=cfg.model.layers,
                    hidden=cfg.model.hidden,
                    attention=cfg.model.attention,
                    score=cfg.model.score,
                    has_attention=bool(getattr(m.translator.model, "has_attention", False)),
                    device=str(m.translator.device),
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
            413: {"description": "too many or too long sentences, or body too large"},
            422: {"description": "invalid request"},
            503: {"description": "queue full"},
        },
    )
    async def translate(req: TranslateRequest) -> TranslateResponse:
        name = req.model or models[0].name
        served = by_name.get(name)
        if served is None:
            raise HTTPException(404, f"unknown model {name!r}; loaded: {', '.join(by_name)}")
        check_request(req, served, limits)
        start = time.perf_counter()
        with_attention = req.attention or req.alignment
        options = (req.beam, req.nbest, req.length_penalty, req.max_len_ratio, with_attention)
        try:
            job = batchers[name].submit(req.sentences, options)
        except QueueFull as err:
            raise HTTPException(503, f"server busy: {err}; retry later") from None
        try:
            results = await asyncio.wrap_future(job.future)
        except UserError as err:
            raise HTTPException(422, str(err)) from None
        # a model failure answers this request only; the worker lives on
        except Exception as err:  # noqa: BLE001
            raise HTTPException(500, f"translation failed: {type(err).__name__}: {err}") from None
        out = []
        for source, hyps in zip(req.sentences, results):
            hs = [_hypothesis(source, h, req.attention, req.alignment) for h in hyps]
            best = hs[0] if hs else HypothesisResult(text="", score=0.0)
            out.append(
                SentenceResult(source=source, text=best.text, score=best.score, hypotheses=hs)
            )
        return TranslateResponse(
            model=name,
            translations=out,
            batch_sentences=job.batch_sentences,
            time_ms=round((time.perf_counter() - start) * 1000, 2),
        )

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def jsonable(value):
    """Validation error details with exceptions and bytes turned into strings."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
