#!/usr/bin/env python3
"""Live sandboxes at scale: open N at once, then measure memory, creation rate, exec latency and pool hand-out.

    python bench/bench_live.py [--sandboxes 1000] [--concurrency 8] [--execs 1000] [--json PATH]

What it reports (targets of the fast-path issue in brackets):

- creation rate: N sandboxes opened with ``concurrency`` creations in flight [>= 200 per second];
- memory per idle sandbox: the drop in the host's MemAvailable once all are open and settled, divided by N
  (kernel objects, the launcher, bubblewrap, the agent, page tables, cgroups) [<= 5 MiB];
- exec of ``true`` in a live sandbox, round-robin over all N while all are open: p50 and p99 [<= 2 ms, <= 10 ms];
  then, in the same run, a bare ``posix_spawn`` + ``waitpid`` of ``/usr/bin/true`` (the floor);
- the machine's CPU per creation, per exec and per bare spawn (user, system and interrupt time of all CPUs from
  ``/proc/stat``: everything the operation made the kernel and every process do, and not the time a virtual
  machine's CPUs were taken by others, ``steal``, which is reported beside): on a shared machine these move much
  less than the wall-clock figures;
- pool hand-out: taking a warm sandbox from a ``SandboxPool`` (giving it back does not wait: the pool resets it in
  the background), and that reset after a command (in place when the agent was untouched), p50 of each.

Run it under the guard with room for N sandboxes (four processes each):
``python scripts/guard.py --pids 16000 --memory 16G -- python bench/bench_live.py``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import rollbox

LIMITS = rollbox.Limits(disk_bytes=16 << 20)
TARGETS = {"creation_per_s": 200.0, "memory_mib_per_sandbox": 5.0, "exec_p50_ms": 2.0, "exec_p99_ms": 10.0}


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def _machine_cpu_ms() -> tuple[float, float]:
    """(busy, stolen) milliseconds of all CPUs so far: user + nice + system + irq + softirq, and steal."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    per_tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    return sum(ticks[i] for i in (0, 1, 2, 5, 6)) * per_tick_ms, ticks[7] * per_tick_ms


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _bare_spawn_ms() -> float:
    start = time.perf_counter()
    pid = os.posix_spawn("/usr/bin/true", ["true"], {})
    os.waitpid(pid, 0)
    return (time.perf_counter() - start) * 1000


async def _open_many(count: int, concurrency: int) -> tuple[list[rollbox.Sandbox], float]:
    gate = asyncio.Semaphore(concurrency)
    opened: list[rollbox.Sandbox] = []

    async def one() -> None:
        async with gate:
            sandbox = rollbox.Sandbox(limits=LIMITS)
            await sandbox.__aenter__()
            opened.append(sandbox)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return opened, time.perf_counter() - start


async def _pool_handout_ms(rounds: int) -> tuple[float, float]:
    """p50 of handing a warm sandbox out, and of a reset after a command (what a returned sandbox goes through in
    the background before it is handed out again)."""
    out: list[float] = []
    resets: list[float] = []
    async with rollbox.SandboxPool(size=2, limits=LIMITS) as pool:
        for _ in range(rounds):
            await asyncio.sleep(0.01)  # an episode's worth of pause: the last return's reset ends meanwhile
            start = time.perf_counter()
            async with pool.sandbox() as sb:
                out.append((time.perf_counter() - start) * 1000)
                await sb.exec(["true"])
    async with rollbox.Sandbox(limits=LIMITS) as sb:
        for _ in range(rounds):
            await sb.exec(["true"])
            start = time.perf_counter()
            await sb.reset()
            resets.append((time.perf_counter() - start) * 1000)
    return statistics.median(out), statistics.median(resets)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    before = _mem_available()
    run_start, stolen_start = _machine_cpu_ms()
    wall_start = time.perf_counter()
    sandboxes, seconds = await _open_many(args.sandboxes, args.concurrency)
    creation_cpu = (_machine_cpu_ms()[0] - run_start) / len(sandboxes)
    try:
        await asyncio.sleep(2)  # let deferred kernel work (namespace setup, page cache) settle
        memory = (before - _mem_available()) / len(sandboxes)
        execs: list[float] = []
        cpu_start = _machine_cpu_ms()[0]
        for i in range(args.execs):
            start = time.perf_counter()
            result = await sandboxes[i % len(sandboxes)].exec(["true"])
            execs.append((time.perf_counter() - start) * 1000)
            if not result.ok:
                raise SystemExit(f"exec failed in a live sandbox: {result}")
        exec_cpu = (_machine_cpu_ms()[0] - cpu_start) / args.execs
        cpu_start = _machine_cpu_ms()[0]
        bare = [_bare_spawn_ms() for _ in range(args.execs)]
        bare_cpu = (_machine_cpu_ms()[0] - cpu_start) / args.execs
        handout, reset = await _pool_handout_ms(200)
    finally:
        close_start = time.perf_counter()
        for sandbox in sandboxes:
            await sandbox.close()
        close_seconds = time.perf_counter() - close_start
    return {
        "sandboxes": len(sandboxes),
        "concurrency": args.concurrency,
        "creation_per_s": len(sandboxes) / seconds,
        "memory_mib_per_sandbox": memory / 2**20,
        "exec_p50_ms": statistics.median(execs),
        "exec_p99_ms": _percentile(execs, 0.99),
        "bare_spawn_p50_ms": statistics.median(bare),
        "pool_handout_p50_ms": handout,
        "reset_p50_ms": reset,
        "close_per_s": len(sandboxes) / close_seconds,
        "creation_cpu_ms": creation_cpu,
        "exec_cpu_ms": exec_cpu,
        "bare_spawn_cpu_ms": bare_cpu,
        "steal_pct": 100
        * (_machine_cpu_ms()[1] - stolen_start)
        / (time.perf_counter() - wall_start)
        / 1000
        / (os.cpu_count() or 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxes", type=int, default=1000, help="how many to hold open at once (1000)")
    parser.add_argument("--concurrency", type=int, default=8, help="creations in flight (8)")
    parser.add_argument("--execs", type=int, default=1000, help="execs of `true`, round-robin over all (1000)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the figures here")
    args = parser.parse_args()
    report = asyncio.run(_main(args))
    print(f"{report['sandboxes']} live sandboxes, {report['concurrency']} creations in flight")
    for key, value in report.items():
        if key in ("sandboxes", "concurrency"):
            continue
        target = TARGETS.get(key)
        verdict = ""
        if target is not None:
            met = value >= target if key == "creation_per_s" else value <= target
            verdict = f"  target {'>=' if key == 'creation_per_s' else '<='} {target:g}: {'PASS' if met else 'MISS'}"
        print(f"  {key:24s} {value:10.2f}{verdict}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
