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
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
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
    p.add_argument("--max-beam", type=int, default=16)
    p.add_argument("--max-body-bytes", type=int, default=1 << 20)
    p.add_argument(
        "--max-queue",
        type=int,
        default=2048,
        help="sentences waiting per model before requests get 503",
    )
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from attnmt.errors import UserError
    from attnmt.serve.app import Limits, create_app, load_models

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
    ):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be at least 1")
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
    )
    models = load_models(args.model, args.checkpoint, args.device)
    app = create_app(models, limits)
    names = ", ".join(m.name for m in models)
    print(f"attnmt: serving {names} on http://{args.host}:{args.port}/", file=sys.stderr)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    except OSError as err:  # e.g. the port is taken
        raise UserError(
            f"cannot listen on {args.host}:{args.port} ({err.strerror or err})"
        ) from None
    return 0
