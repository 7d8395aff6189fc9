#!/usr/bin/env python3
"""What the HTTP service serves: ``/run_code`` requests per second at several concurrencies, with one worker process
and with several, beside the same programs run directly through ``rollbox.SandboxPool`` in one process.

    python bench/bench_server.py [--concurrent 32,128] [--workers 1,2] [--seconds 8] [--rounds 3]
                                 [--pool-size N] [--keys] [--json PATH]

Every request runs the same short Python program (``print(sum(range(i)))``, SandboxFusion's payload) on the
service's warm sandboxes (``--pool-size`` per worker; default twice the CPUs) with the warm Python zygote:

- ``direct``: ``--concurrent`` asyncio tasks in this process each borrow a sandbox of a ``SandboxPool`` of the same
  size, write the program and ``exec`` it (the floor: no HTTP at all);
- ``http``: a ``rollbox serve --workers W`` process per worker count, all started first, measured in turn (the
  configurations alternate, round after round, so that a change in the machine's load falls on all of them). The
  client is lean: raw HTTP/1.1 on asyncio streams, ``--concurrent`` keep-alive connections each sending its next
  request when the last is answered, and a byte comparison for the answer's stdout (no HTTP library, no JSON
  parsing on the way). Its own CPU is measured and reported beside the figures, so that a reader can see it does
  not dominate. ``--keys`` sends an ``Idempotency-Key`` with each request, as ``rollbox.Client`` does (each keyed
  request is served by its key's worker: the cost of that hand-over shows with several workers).

For each it reports requests per second over a ``--seconds`` window (after a second of warm-up), per-request
latency (p50, p99), the errors (every answer must be right), the client's CPU (share of one core), the
workers' own CPU per request, and the load average before and after. The figure quoted is the median of the
rounds. Nothing is asserted. Run it under the guard:
``python scripts/guard.py --memory 8G --pids 8192 -- python bench/bench_server.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import rollbox

_TICKS = os.sysconf("SC_CLK_TCK")


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _program(i: int) -> tuple[str, bytes]:
    """The program of request ``i`` and the stdout its answer must carry (as it appears in the JSON)."""
    n = i % 1000
    return f"print(sum(range({n})))", f'"stdout":"{sum(range(n))}\\n"'.encode()


async def _direct(concurrent: int, seconds: float, pool_size: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors = done = 0
    async with rollbox.SandboxPool(size=pool_size, warm_python=True) as pool:
        stop_at = 0.0
        counting = False

        async def loop(worker: int) -> None:
            nonlocal errors, done
            i = worker
            while time.monotonic() < stop_at:
                code, _ = _program(i)
                started = time.monotonic()
                async with pool.sandbox() as sb:
                    await sb.write_file("main.py", code)
                    result = await sb.exec(["python3", "main.py"], warm_python=True)
                if counting:
                    latencies.append(time.monotonic() - started)
                    done += 1
                    errors += result.stdout != f"{sum(range(i % 1000))}\n".encode()
                i += concurrent

        stop_at = time.monotonic() + 1 + seconds
        runners = [asyncio.create_task(loop(w)) for w in range(concurrent)]
        await asyncio.sleep(1)
        counting, window_start = True, time.monotonic()
        await asyncio.gather(*runners)
        window = time.monotonic() - window_start
    return {"requests_per_s": round(done / window, 1), "p50_ms": round(1000 * _percentile(latencies, 0.5), 1),
            "p99_ms": round(1000 * _percentile(latencies, 0.99), 1), "errors": errors}  # fmt: skip


class _Client:
    """``concurrent`` keep-alive HTTP/1.1 connections, each posting its next ``/run_code`` when the last is
    answered."""

    def __init__(self, port: int, concurrent: int, keys: bool) -> None:
        self.port, self.concurrent, self.keys = port, concurrent, keys
        self.latencies: list[float] = []
        self.errors = self.done = 0
        self.counting = False

    async def _connection(self, first: int, stop_at: float) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        i = first
        try:
            while time.monotonic() < stop_at:
                code, expected = _program(i)
                body = json.dumps({"code": code, "language": "python"}).encode()
                key = f"Idempotency-Key: {uuid.uuid4().hex}\r\n" if self.keys else ""
                head = (
                    f"POST /run_code HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n{key}"
                    f"Content-Length: {len(body)}\r\n\r\n"
                )
                started = time.monotonic()
                writer.write(head.encode() + body)
                status_line = await reader.readline()
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                answer = await reader.readexactly(length)
                if self.counting:
                    self.latencies.append(time.monotonic() - started)
                    self.done += 1
                    self.errors += not (status_line.startswith(b"HTTP/1.1 200") and expected in answer)
                i += self.concurrent
        finally:
            writer.close()

    async def run(self, seconds: float) -> float:
        """Run for a second of warm-up and ``seconds`` counted; returns the counted window's length."""
        stop_at = time.monotonic() + 1 + seconds
        connections = [asyncio.create_task(self._connection(c, stop_at)) for c in range(self.concurrent)]
        await asyncio.sleep(1)
        self.counting, window_start = True, time.monotonic()
        await asyncio.gather(*connections)
        return time.monotonic() - window_start


def _cpu_s(pids: list[int]) -> float:
    """User and system CPU seconds of these processes so far."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def _measure(server: dict[str, Any], concurrent: int, seconds: float, keys: bool) -> dict[str, Any]:
    client = _Client(server["port"], concurrent, keys)
    load_before = os.getloadavg()[0]
    workers_before, mine_before = _cpu_s(server["workers"]), time.process_time()
    window = asyncio.run(client.run(seconds))
    mine, workers = time.process_time() - mine_before, _cpu_s(server["workers"]) - workers_before
    return {
        "requests_per_s": round(client.done / window, 1),
        "p50_ms": round(1000 * _percentile(client.latencies, 0.5), 1),
        "p99_ms": round(1000 * _percentile(client.latencies, 0.99), 1),
        "errors": client.errors,
        "client_cpu_share": round(mine / window, 3),
        "workers_cpu_ms_per_request": round(1000 * workers / max(client.done, 1), 3),
        "load_before": round(load_before, 1),
        "load_after": round(os.getloadavg()[0], 1),
    }


def _serve(workers: int, pool_size: int, home: str) -> dict[str, Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "rollbox", "serve", "--port", str(port), "--pool-size", str(pool_size)]
    log = Path(home) / f"serve-{workers}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*argv, "--workers", str(workers), "--archive", ""],
            env={**os.environ, "ROLLBOX_HOME": home},
            stdout=out,
            stderr=out,
        )
    deadline = time.monotonic() + 120
    while True:
        if workers == 1:
            found = [process.pid] if "Application startup complete" in log.read_text() else []
        else:
            found = [int(p) for p in re.findall(r"\(pid (\d+)\) serves", log.read_text())]
        if len(found) == workers:
            time.sleep(1)  # the pools warm
            return {"workers": found, "port": port, "process": process}
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise SystemExit(f"rollbox serve --workers {workers} did not start: see {log}")
        time.sleep(0.2)


def _numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrent", type=_numbers, default=[32, 128])
    parser.add_argument("--workers", type=_numbers, default=[1, 2])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool-size", type=int, default=2 * len(os.sched_getaffinity(0)))
    parser.add_argument("--keys", action="store_true", help="send an Idempotency-Key with each request")
    parser.add_argument("--no-direct", dest="direct", action="store_false")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "cpus": len(os.sched_getaffinity(0)),
        "pool_size_per_worker": args.pool_size,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "keys": args.keys,
        "client": "raw HTTP/1.1 on asyncio streams, keep-alive, one connection per concurrent request",
    }
    if args.direct:
        report["direct"] = {c: asyncio.run(_direct(c, args.seconds, args.pool_size)) for c in args.concurrent}
    rounds: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as home:
        servers = {w: _serve(w, args.pool_size, home) for w in args.workers}
        try:
            for _ in range(args.rounds):
                for concurrent in args.concurrent:
                    for workers, server in servers.items():
                        measured = _measure(server, concurrent, args.seconds, args.keys)
                        rounds.setdefault(f"workers={workers} concurrent={concurrent}", []).append(measured)
                        print(workers, concurrent, measured, file=sys.stderr, flush=True)
        finally:
            for server in servers.values():
                server["process"].terminate()
                server["process"].wait(timeout=120)
    report["http"] = {
        name: {
            "median_requests_per_s": statistics.median(r["requests_per_s"] for r in found),
            "median_p50_ms": statistics.median(r["p50_ms"] for r in found),
            "median_p99_ms": statistics.median(r["p99_ms"] for r in found),
            "errors": sum(r["errors"] for r in found),
            "median_client_cpu_share": statistics.median(r["client_cpu_share"] for r in found),
            "median_workers_cpu_ms_per_request": statistics.median(r["workers_cpu_ms_per_request"] for r in found),
            "rounds": found,
        }
        for name, found in rounds.items()
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
