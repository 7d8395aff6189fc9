#!/usr/bin/env python3
"""What a rollbox sandbox costs, next to a bare fork-exec and a bare bubblewrap call, measured in one run.

    python bench/bench_sandbox.py [--iterations N] [--rounds R] [--json PATH]

Every case runs ``true``, so what is measured is the machinery around a command, not the command:

- ``create+exec+destroy``: ``async with Sandbox() as sb: await sb.exec(["true"])``;
- ``exec in a live sandbox``: ``await sb.exec(["true"])`` in one sandbox kept open for the whole run;
- ``bare bwrap``: ``subprocess.run`` of bubblewrap with every namespace unshared and a read-only /usr;
- ``subprocess.run(true)`` and ``posix_spawn+waitpid``: a bare fork-exec of ``/usr/bin/true``.

The cases run in rounds: each round runs N iterations of every case, the order rotating from round to round,
so that the noise of a shared machine falls on all cases alike. Warm-up iterations run first and are
discarded. The targets are printed beside the results with PASS or MISS; nothing is asserted.

Needs what rollbox's namespaces backend needs (root, cgroups), and bubblewrap for the peer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import rollbox
from rollbox.sandbox.namespaces._backend import NamespaceHost

TRUE = "/usr/bin/true"
CREATE_EXEC_DESTROY = "create+exec+destroy"
LIVE_EXEC = "exec in a live sandbox"
BARE_BWRAP = "bare bwrap"
FORK_EXEC = "subprocess.run(true)"
POSIX_SPAWN = "posix_spawn+waitpid"
#: p50 targets, printed beside the results.
TARGETS_MS = {CREATE_EXEC_DESTROY: 15.0, LIVE_EXEC: 5.0}
WARMUP_ITERATIONS = 10

Case = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Stats:
    """The distribution of one case's iteration times, in milliseconds."""

    n: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    min_ms: float
    #: The interquartile range, p75 - p25.
    iqr_ms: float

    @classmethod
    def of(cls, samples_ms: list[float]) -> Stats:
        q = statistics.quantiles(samples_ms, n=100, method="inclusive")
        return cls(len(samples_ms), q[49], q[89], q[98], min(samples_ms), q[74] - q[24])


def _bare_bwrap_argv(bwrap: str) -> list[str]:
    return [
        bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--proc", "/proc", "--dev", "/dev", TRUE,
    ]  # fmt: skip


def _check(result: rollbox.ExecResult) -> None:
    if not result.ok:
        raise RuntimeError(
            f"`true` did not succeed in the sandbox (status {result.status.value}, error {result.error!r}, "
            f"stderr {result.stderr_text!r}); fix the sandbox before benchmarking it"
        )


def _cases(live: rollbox.Sandbox, bwrap: str) -> dict[str, Case]:
    bwrap_argv = _bare_bwrap_argv(bwrap)

    async def create_exec_destroy() -> None:
        async with rollbox.Sandbox() as sb:
            _check(await sb.exec(["true"]))

    async def live_exec() -> None:
        _check(await live.exec(["true"]))

    async def bare_bwrap() -> None:
        subprocess.run(bwrap_argv, check=True)

    async def fork_exec() -> None:
        subprocess.run([TRUE], check=True)

    async def posix_spawn() -> None:
        pid = os.posix_spawn(TRUE, [TRUE], os.environ)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise RuntimeError(f"{TRUE} ended with wait status {status}")

    return {
        CREATE_EXEC_DESTROY: create_exec_destroy,
        LIVE_EXEC: live_exec,
        BARE_BWRAP: bare_bwrap,
        FORK_EXEC: fork_exec,
        POSIX_SPAWN: posix_spawn,
    }


async def _measure(cases: dict[str, Case], *, iterations: int, rounds: int) -> dict[str, list[list[float]]]:
    """Iteration times in ms, per case and round, the cases interleaved round by round."""
    for run in cases.values():
        for _ in range(WARMUP_ITERATIONS):
            await run()
    samples: dict[str, list[list[float]]] = {name: [] for name in cases}
    names = list(cases)
    started = time.monotonic()
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            run = cases[name]
            times: list[float] = []
            for _ in range(iterations):
                start = time.perf_counter_ns()
                await run()
                times.append((time.perf_counter_ns() - start) / 1e6)
            samples[name].append(times)
        print(f"  round {r + 1}/{rounds} done ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return samples


def _table(stats: dict[str, Stats]) -> str:
    bwrap_p50, fork_p50 = stats[BARE_BWRAP].p50_ms, stats[FORK_EXEC].p50_ms
    columns = ("n", "p50", "p90", "p99", "min", "IQR", "/bwrap", "/fork")
    lines = [f"{'case (ms)':<24}" + "".join(f"{c:>8}" for c in columns)]
    for name, s in stats.items():
        values = (s.p50_ms, s.p90_ms, s.p99_ms, s.min_ms, s.iqr_ms)
        ratios = (s.p50_ms / bwrap_p50, s.p50_ms / fork_p50)
        lines.append(
            f"{name:<24}{s.n:>8}" + "".join(f"{v:>8.2f}" for v in values) + "".join(f"{r:>7.1f}x" for r in ratios)
        )
    lines.append(f"/bwrap, /fork: p50 over the p50 of {BARE_BWRAP}, of {FORK_EXEC}")
    return "\n".join(lines)


def _targets(stats: dict[str, Stats]) -> list[dict[str, Any]]:
    return [
        {"case": name, "p50_target_ms": target, "p50_ms": stats[name].p50_ms, "met": stats[name].p50_ms <= target}
        for name, target in TARGETS_MS.items()
    ]


def _machine(host: NamespaceHost, bwrap: str) -> dict[str, str]:
    def output(*argv: str) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return "unknown"

    return {
        "cpus": str(len(os.sched_getaffinity(0))),
        "kernel": platform.release(),
        "bwrap": output(bwrap, "--version"),
        "cgroup": f"v{host.cgroups.version}",
        "python": platform.python_version(),
        "rollbox": output("git", "-C", str(Path(__file__).parent), "describe", "--always", "--dirty"),
    }


# -- main --------------------------------------------------------------------------------------------------


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    host = NamespaceHost.get()
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SystemExit("the peer, bubblewrap, is not installed: apt-get install bubblewrap")
    machine = _machine(host, bwrap)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()))
    print(
        f"{args.rounds} rounds x {args.iterations} iterations per case, interleaved; "
        f"{WARMUP_ITERATIONS} warm-up iterations per case discarded",
        flush=True,
    )
    async with rollbox.Sandbox() as live:
        samples = await _measure(_cases(live, bwrap), iterations=args.iterations, rounds=args.rounds)
    stats = {name: Stats.of([t for r in rounds for t in r]) for name, rounds in samples.items()}
    print()
    print(_table(stats))
    print()
    targets = _targets(stats)
    for t in targets:
        verdict = "PASS" if t["met"] else "MISS"
        print(f"target: {t['case']} p50 <= {t['p50_target_ms']:g} ms: {t['p50_ms']:.2f} ms  {verdict}")
    report: dict[str, Any] = {
        "machine": machine,
        "config": {"iterations": args.iterations, "rounds": args.rounds, "warmup": WARMUP_ITERATIONS},
        "cases": {
            name: {
                "stats": asdict(s),
                "p50_over_bare_bwrap_p50": s.p50_ms / stats[BARE_BWRAP].p50_ms,
                "p50_over_fork_exec_p50": s.p50_ms / stats[FORK_EXEC].p50_ms,
                "samples_ms_by_round": samples[name],
            }
            for name, s in stats.items()
        },
        "targets": targets,
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=100, help="iterations per case per round (100)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds, the cases interleaved in each (10)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the raw numbers here")
    args = parser.parse_args()
    if args.iterations < 1 or args.rounds < 1 or args.iterations * args.rounds < 2:
        parser.error("--iterations and --rounds must be positive and give at least 2 samples per case")
    try:
        report = asyncio.run(_main(args))
    except rollbox.IsolationUnavailable as exc:
        raise SystemExit(f"cannot benchmark rollbox's namespaces backend here: {exc}") from exc
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"\nraw numbers written to {args.json}")


if __name__ == "__main__":
    main()
