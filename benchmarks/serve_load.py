"""Load test of ``attnmt serve`` on loopback: dynamic batching on vs off.

    python benchmarks/serve_load.py [--model RUN] [--clients 16] [--duration 20] [--beam 5]

Starts the server twice as a subprocess on 127.0.0.1 (a free port; ``--threads 1``), once with
dynamic batching (``--max-wait-ms 5 --max-batch 32``) and once with ``--no-batching``. N client
threads each send one sentence per request over a keep-alive connection, in a loop bounded by
``--duration`` seconds and ``--max-requests`` per client, and record latency and status. Reports
requests/s, p50/p99 latency, the error count (must be 0) and the mean number of sentences per
decoder call. Without ``--model`` it first trains a small model (1x128 LSTM, global attention) on
a synthetic corpus in a temporary directory, so the script needs no data.

Prints one JSON line and a one-line summary.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(60)]


def synthetic_pair(rng: random.Random) -> tuple[str, str]:
    """A toy translation: each word maps to a target word, adjacent pairs are swapped."""
    src = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
    tgt = [w.replace("w", "v") for w in src]
    for i in range(0, len(tgt) - 1, 2):
        tgt[i], tgt[i + 1] = tgt[i + 1], tgt[i]
    return " ".join(src), " ".join(tgt)


def train_small_model(workdir: Path, steps: int) -> Path:
    rng = random.Random(0)
    for split, n in (("train", 4000), ("dev", 100)):
        pairs = [synthetic_pair(rng) for _ in range(n)]
        (workdir / f"{split}.src").write_text("".join(s + "\n" for s, _ in pairs))
        (workdir / f"{split}.tgt").write_text("".join(t + "\n" for _, t in pairs))
    config = workdir / "small.yaml"
    config.write_text(
        f"data: {{train: {workdir}/train, dev: {workdir}/dev, src: src, tgt: tgt, "
        "tokenizer: word, max_len: 30}\n"
        "model: {layers: 1, hidden: 128, embed: 128, attention: global, score: general, "
        "dropout: 0.0}\n"
        f"train: {{optimizer: adam, lr: 0.005, warmup: 50, batch_size: 64, max_steps: {steps}, "
        "epochs: 100, device: cpu, threads: 1, log_every: 50}\n"
    )
    run = workdir / "small"
    subprocess.run(
        [sys.executable, "-m", "attnmt", "train", str(config), "--out", str(run)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(run: Path, port: int, batching: bool, max_batch: int, wait_ms: float):
    cmd = [
        sys.executable,
        "-m",
        "attnmt",
        "serve",
        "--model",
        str(run),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        "1",
        "--log-level",
        "warning",
        "--max-batch",
        str(max_batch),
        "--max-wait-ms",
        str(wait_ms),
    ]
    if not batching:
        cmd.append("--no-batching")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


def client(port, sentences, beam, stop_at, max_requests, out):
    rng = random.Random(len(out))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for _ in range(max_requests):
        if time.monotonic() >= stop_at:
            break
        body = json.dumps({"sentences": [rng.choice(sentences)], "beam": beam})
        start = time.perf_counter()
        try:
            conn.request("POST", "/translate", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            payload = response.read()
            ok = response.status == 200
            batch = json.loads(payload)["batch_sentences"] if ok else 0
        except (OSError, http.client.HTTPException, ValueError):
            ok, batch = False, 0
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        out.append((time.perf_counter() - start, ok, batch))
    conn.close()


def measure(run: Path, batching: bool, args) -> dict:
    port = free_port()
    proc = start_server(run, port, batching, args.max_batch, args.max_wait_ms)
    try:
        rng = random.Random(1)
        sentences = (
            [synthetic_pair(rng)[0] for _ in range(200)]
            if args.sentences is None
            else [
                line.strip()
                for line in Path(args.sentences).read_text().splitlines()
                if line.strip()
            ]
        )
        client(port, sentences[:3], args.beam, time.monotonic() + 5, 3, [])  # warm-up
        results: list[list] = [[] for _ in range(args.clients)]
        start = time.monotonic()
        stop_at = start + args.duration
        threads = [
            threading.Thread(
                target=client,
                args=(port, sentences, args.beam, stop_at, args.max_requests, results[i]),
            )
            for i in range(args.clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - start
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    flat = [r for rs in results for r in rs]
    lat = sorted(x for x, ok, _ in flat if ok)
    ok = len(lat)

    def pct(p: float) -> float:
        return round(1000 * lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else float("nan")

    return {
        "batching": batching,
        "requests": len(flat),
        "errors": len(flat) - ok,
        "rps": round(ok / wall, 2),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "mean_ms": round(1000 * statistics.fmean(lat), 1) if lat else float("nan"),
        "mean_batch": round(statistics.fmean(b for _, good, b in flat if good), 2) if ok else 0,
        "wall_s": round(wall, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", help="run directory (default: train a small synthetic model first)")
    p.add_argument("--sentences", help="file of source sentences to send (default: synthetic)")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--duration", type=float, default=20.0, help="seconds per mode")
    p.add_argument("--max-requests", type=int, default=5000, help="per client and mode")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--max-wait-ms", type=float, default=5.0)
    p.add_argument("--train-steps", type=int, default=300)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.model) if args.model else train_small_model(Path(tmp), args.train_steps)
        on = measure(run, True, args)
        off = measure(run, False, args)
    result = {
        "benchmark": "serve_load",
        "clients": args.clients,
        "beam": args.beam,
        "duration_s": args.duration,
        "cpus": os.cpu_count(),
        "on": on,
        "off": off,
        "rps_ratio_on_off": round(on["rps"] / off["rps"], 2) if off["rps"] else None,
    }
    print(json.dumps(result))
    print(
        f"serve_load: {args.clients} clients, beam {args.beam}: batching on {on['rps']} req/s "
        f"(p50 {on['p50_ms']} ms, p99 {on['p99_ms']} ms, {on['mean_batch']} sents/call, "
        f"{on['errors']} errors) vs off {off['rps']} req/s (p50 {off['p50_ms']} ms, p99 "
        f"{off['p99_ms']} ms, {off['errors']} errors): x{result['rps_ratio_on_off']}"
    )
    return 0 if on["errors"] == 0 and off["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
