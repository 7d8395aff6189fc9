#!/usr/bin/env python3
"""What the HTTP service costs: ``/run_code`` under concurrent load, beside the same programs run directly through
``rollbox.SandboxPool`` in the same process.

    python bench/bench_server.py [--concurrent 128] [--rounds 3] [--pool-size N] [--json PATH]

Both sides run the same short Python program (``print(sum(range(i)))``), ``--concurrent`` at once, ``--rounds``
times, on warm sandboxes of the same pool size (the service's default: twice the CPUs) with the warm Python
zygote:

- ``direct``: ``--concurrent`` asyncio tasks each borrow a pool sandbox, write the program and ``exec`` it;
- ``http``: ``--concurrent`` simultaneous ``POST /run_code`` calls (SandboxFusion's payload) to a ``rollbox serve``
  started by this script on 127.0.0.1 (a separate process, as a trainer would call it), over as many connections.

It reports, for each, per-call latency (p50, p90, p99, max), the wall time of a round and the calls per second,
the errors (every call must succeed), and the ratio of the two medians. Nothing is asserted.
Run it under the guard: ``python scripts/guard.py --memory 8G -- python bench/bench_server.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

import rollbox


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(latencies: list[float], walls: list[float], calls: int, errors: int) -> dict[str, Any]:
    return {
        "p50_ms": round(1000 * _percentile(latencies, 0.5), 2),
        "p90_ms": round(1000 * _percentile(latencies, 0.9), 2),
        "p99_ms": round(1000 * _percentile(latencies, 0.99), 2),
        "max_ms": round(1000 * max(latencies), 2),
        "round_wall_s": round(min(walls), 3),
        "calls_per_s": round(calls / min(walls), 1),
        "errors": errors,
    }


async def _direct(concurrent: int, rounds: int, pool_size: int) -> dict[str, Any]:
    latencies: list[float] = []
    walls: list[float] = []
    errors = 0
    async with rollbox.SandboxPool(size=pool_size, warm_python=True) as pool:

        async def one(i: int) -> None:
            nonlocal errors
            started = time.monotonic()
            async with pool.sandbox() as sb:
                await sb.write_file("main.py", f"print(sum(range({i})))")
                result = await sb.exec(["python3", "main.py"], warm_python=True)
            latencies.append(time.monotonic() - started)
            errors += result.stdout != f"{sum(range(i))}\n".encode()

        await asyncio.gather(*(one(i) for i in range(pool_size)))  # warm up
        latencies.clear()
        for _ in range(rounds):
            started = time.monotonic()
            await asyncio.gather(*(one(i) for i in range(concurrent)))
            walls.append(time.monotonic() - started)
    return _summary(latencies, walls, concurrent, errors)


async def _http(url: str, concurrent: int, rounds: int) -> dict[str, Any]:
    latencies: list[float] = []
    walls: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=concurrent, max_keepalive_connections=concurrent)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:

        async def one(i: int) -> None:
            nonlocal errors
            payload = json.dumps({"code": f"print(sum(range({i})))", "language": "python", "stdin": ""})
            started = time.monotonic()
            response = await http.post("/run_code", content=payload, headers={"Content-Type": "application/json"})
            latencies.append(time.monotonic() - started)
            ok = response.status_code == 200 and response.json()["run_result"]["stdout"] == f"{sum(range(i))}\n"
            errors += not ok

        await asyncio.gather(*(one(i) for i in range(concurrent)))  # warm up: pool, connections
        latencies.clear()
        errors = 0
        for _ in range(rounds):
            started = time.monotonic()
            await asyncio.gather(*(one(i) for i in range(concurrent)))
            walls.append(time.monotonic() - started)
    return _summary(latencies, walls, concurrent, errors)


def _serve(pool_size: int, home: str) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "rollbox", "serve", "--port", str(port), "--pool-size", str(pool_size)]
    process = subprocess.Popen(
        [*command, "--archive", ""], env={**os.environ, "ROLLBOX_HOME": home}, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise SystemExit("rollbox serve did not start")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrent", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool-size", type=int, default=2 * len(os.sched_getaffinity(0)))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    direct = asyncio.run(_direct(args.concurrent, args.rounds, args.pool_size))
    with tempfile.TemporaryDirectory() as home:
        process, url = _serve(args.pool_size, home)
        try:
            http = asyncio.run(_http(url, args.concurrent, args.rounds))
        finally:
            process.terminate()
            process.wait(timeout=60)
    report = {
        "concurrent": args.concurrent,
        "rounds": args.rounds,
        "pool_size": args.pool_size,
        "cpus": len(os.sched_getaffinity(0)),
        "direct": direct,
        "http": http,
        "p50_ratio_http_over_direct": round(http["p50_ms"] / direct["p50_ms"], 2),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
