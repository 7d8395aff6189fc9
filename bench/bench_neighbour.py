#!/usr/bin/env python3
"""What one sandbox's heavy command costs another's: a neighbour's ``exec`` while big commands are killed beside it.

    python bench/bench_neighbour.py [--mib 1000] [--kills 8] [--json PATH]

Sandboxes share one event loop. In the same run, a neighbour sandbox runs ``true`` over and over:

- alone (the peer: nothing else happening);
- while another sandbox, again and again, fills ``--mib`` MiB and is killed at its timeout. A process that dies
  with a gigabyte mapped takes tens of milliseconds to leave its cgroup; a kill that waited for that without
  giving up the event loop held every other sandbox's commands as long.

It reports the neighbour's exec latency, p50, p99 and max, in both phases, and the ratio of the two p99s; and the
longest stall of the event loop itself (a 1 ms ticker's largest overshoot) in both. Nothing is asserted.
Run it under the guard: ``python scripts/guard.py --memory 8G -- python bench/bench_neighbour.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import rollbox

_FILL = "import time; b = bytearray({mib} << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(30)"


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _ticker(overshoots: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        started = time.monotonic()
        await asyncio.sleep(0.001)
        overshoots.append(time.monotonic() - started - 0.001)


async def _neighbour(sb: rollbox.Sandbox, latencies: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        started = time.monotonic()
        result = await sb.exec(["true"])
        latencies.append(time.monotonic() - started)
        if not result.ok:
            raise RuntimeError(f"the neighbour's command failed: {result}")


async def _phase(neighbour: rollbox.Sandbox, heavy: rollbox.Sandbox | None, mib: int, kills: int) -> dict[str, Any]:
    latencies: list[float] = []
    overshoots: list[float] = []
    stop = asyncio.Event()
    background = [
        asyncio.ensure_future(_neighbour(neighbour, latencies, stop)),
        asyncio.ensure_future(_ticker(overshoots, stop)),
    ]
    statuses = []
    try:
        if heavy is None:
            await asyncio.sleep(kills * 1.0)
        else:
            for _ in range(kills):
                result = await heavy.exec(["python3", "-c", _FILL.format(mib=mib)], timeout_s=1.0)
                statuses.append(result.status.value)
    finally:
        stop.set()
        await asyncio.gather(*background)
    return {
        "execs": len(latencies),
        "exec_p50_ms": _percentile(latencies, 0.5) * 1000,
        "exec_p99_ms": _percentile(latencies, 0.99) * 1000,
        "exec_max_ms": max(latencies) * 1000,
        "loop_stall_max_ms": max(overshoots) * 1000,
        "heavy_statuses": sorted(set(statuses)),
    }


async def main(mib: int, kills: int) -> dict[str, Any]:
    heavy_limits = rollbox.Limits(timeout_s=5, memory_bytes=(mib + 256) << 20, disk_bytes=16 << 20)
    async with (
        rollbox.Sandbox(limits=rollbox.Limits(disk_bytes=16 << 20)) as neighbour,
        rollbox.Sandbox(limits=heavy_limits) as heavy,
    ):
        await neighbour.exec(["true"])
        alone = await _phase(neighbour, None, mib, kills)
        beside = await _phase(neighbour, heavy, mib, kills)
    return {
        "mib": mib,
        "kills": kills,
        "alone": alone,
        "beside_kills": beside,
        "p99_ratio": beside["exec_p99_ms"] / alone["exec_p99_ms"],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=1000, help="what the heavy command fills before it is killed")
    parser.add_argument("--kills", type=int, default=8, help="how many heavy commands are killed (about 1 s each)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures = asyncio.run(main(args.mib, args.kills))
    for phase in ("alone", "beside_kills"):
        f = figures[phase]
        print(
            f"{phase:>13}: {f['execs']} execs, p50 {f['exec_p50_ms']:.2f} ms, p99 {f['exec_p99_ms']:.2f} ms, "
            f"max {f['exec_max_ms']:.1f} ms; event loop's longest stall {f['loop_stall_max_ms']:.1f} ms"
        )
    heavy = figures["beside_kills"]["heavy_statuses"]
    print(f"neighbour's p99, beside the kills / alone: {figures['p99_ratio']:.2f}x; the heavy commands: {heavy}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
