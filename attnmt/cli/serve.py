"""attnmt serve --model RUN [--model NAME=RUN2 ...] [--host 127.0.0.1] [--port 8000]

An HTTP translation service with a web page (attention heatmaps) at ``/``; see attnmt/serve/app.py
and docs/SERVING_AND_SCALING.md.
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve trained models over HTTP, with a web page",
        description="Serve one or more trained runs over HTTP: POST /translate, "
        "GET /models, GET /health, a web page at /, the OpenAPI schema at /openapi.json.",
    )
    p.add_argument(
        "--model",
        required=True,
        action="append",
        metavar="[NAME=]RUN",
        help="training run directory, optionally named NAME (default: its basename); "
        "repeat to serve several models",
    )
    p.add_argument("--checkpoint", default="best", help="best, last or a step-NNNNNNNN directory")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: loopback only)"
    )
    p.add_argument("--port", type=int, default=8000, help="TCP port to listen on (0: any free one)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--int8", action="store_true",
                   help="CPU: each model's output layer as an 8-bit product (as translate --int8)")
    p.add_argument("--bf16", action="store_true",
                   help="search in bfloat16 (as translate --bf16; the default on CPUs with "
                   "bfloat16 units for LSTM and Transformer models)")
    p.add_argument("--float32", action="store_true",
                   help="search in float32 even where bfloat16 is the default")
    p.add_argument("--max-batch", type=int, default=32, help="sentences per decoder call")
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=5.0,
        help="how long a request waits for others to share its batch (0: no batching)",
    )
    p.add_argument("--no-batching", action="store_true", help="decode every request on its own")
    p.add_argument("--max-sentences", type=int, default=64, help="sentences per request")
    p.add_argument("--max-tokens", type=int, default=200, help="source tokens per sentence")
    p.add_argument("--max-chars", type=int, default=4000, help="characters per sentence")
    p.add_argument("--max-beam", type=int, default=16, help="largest beam a request may ask for (422 above it): each step of a search costs beam x vocabulary scores per sentence")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body (413 above it)")
    p.add_argument(
        "--max-queue",
        type=int,
        default=2048,
        help="sentences waiting per model before requests get 503",
    )
    p.add_argument(
        "--max-response-bytes",
        type=int,
        default=4 << 20,
        help="largest answer one request may ask for, counted in the worst case before decoding "
        "(413 above it; default 4 MiB)",
    )
    p.add_argument(
        "--max-pending-bytes",
        type=int,
        default=32 << 20,
        help="the worst-case answers of all requests in flight together (503 above it; "
        "default 32 MiB)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=60.0,
        help="seconds a request may wait and decode before it gets 504 (default 60)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="accept requests whose Host header is NAME (repeatable; '*' accepts any); "
        "default: localhost, 127.0.0.1, ::1 and the --host address",
    )
    p.add_argument(
        "--docs",
        action="store_true",
        help="serve FastAPI's interactive docs at /docs (they load their scripts from a CDN)",
    )
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level (info: one line per request)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from attnmt.errors import UserError
    from attnmt.serve.app import Limits, create_app, load_models
    from attnmt.serve.guards import LOOPBACK_HOSTS

    try:
        import uvicorn
    except ImportError:
        raise UserError(
            "attnmt serve needs fastapi and uvicorn: pip install 'attnmt[serve]'"
        ) from None
    for flag in (
        "max_batch",
        "max_sentences",
        "max_tokens",
        "max_chars",
        "max_beam",
        "max_body_bytes",
        "max_queue",
        "max_response_bytes",
        "max_pending_bytes",
    ):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be at least 1")
    if args.max_pending_bytes < args.max_response_bytes:
        raise UserError("--max-pending-bytes must be at least --max-response-bytes")
    if not 0 < args.request_timeout < float("inf"):
        raise UserError(f"--request-timeout must be a positive number, got {args.request_timeout}")
    if not 0 <= args.max_wait_ms < float("inf"):
        raise UserError(f"--max-wait-ms must be a number >= 0, got {args.max_wait_ms}")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {args.port}")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    limits = Limits(
        max_sentences=args.max_sentences,
        max_tokens=args.max_tokens,
        max_chars=args.max_chars,
        max_beam=args.max_beam,
        max_body_bytes=args.max_body_bytes,
        max_batch=args.max_batch,
        max_wait_ms=0.0 if args.no_batching else args.max_wait_ms,
        max_queue=args.max_queue,
        max_response_bytes=args.max_response_bytes,
        max_pending_bytes=args.max_pending_bytes,
        request_timeout=args.request_timeout,
    )
    hosts = list(LOOPBACK_HOSTS)
    if args.host not in ("0.0.0.0", "::", ""):  # a wildcard address is no name clients use
        hosts.append(args.host)
    hosts += args.allow_host
    models = load_models(
        args.model, args.checkpoint, args.device, args.int8, args.bf16, args.float32
    )
    app = create_app(models, limits, allowed_hosts=hosts, docs=args.docs)
    names = ", ".join(m.name for m in models)
    print(f"attnmt: serving {names} on http://{args.host}:{args.port}/ "
          f"(Host names accepted: {', '.join(dict.fromkeys(hosts))})", file=sys.stderr)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    except OSError as err:  # e.g. the port is taken
        raise UserError(
            f"cannot listen on {args.host}:{args.port} ({err.strerror or err})"
        ) from None
    return 0
