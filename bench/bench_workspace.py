#!/usr/bin/env python3
"""What a workspace costs a sandbox: an empty one, a large repository overlaid (``Sandbox(workspace=...)``), and
the same repository copied in (``write_tree``, the way without overlays), side by side in one run.

    python bench/bench_workspace.py [--files N] [--megabytes M] [--iterations N] [--rounds R] [--share N]
                                    [--json PATH]

The repository is made once in a temporary directory on the host's disk: N files (default 10,000) in nested
directories, M megabytes in all (default 100). Cases, each ``start, exec(["true"]), close``:

- ``empty``: ``Sandbox()``, the baseline;
- ``overlay``: ``Sandbox(workspace=REPO)``;
- ``copy``: ``Sandbox()`` then ``write_tree(REPO)``: every file written into the sandbox's tree.

and, in a pool of one sandbox on REPO, what handing it back costs: ``reset, untouched`` (nothing in the workspace
changed: in place) and ``reset, one file changed`` (a restart over a new overlay). The cases alternate round by
round; medians are printed. Then ``--share`` sandboxes (default 100) are opened at once on REPO: the memory
they take together (MemAvailable before and after) and their trees' use of their disk limit, beside what
copying would cost them (the repository's size each).

Needs what rollbox's namespaces backend needs (root, cgroups) and a kernel that overlays the repository's
filesystem (the overlay case says ``copy`` otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import rollbox
from rollbox.sandbox import Limits, SandboxPool

LIMITS = Limits(timeout_s=30, cpu_time_s=10, disk_bytes=512 * 2**20)


def make_repository(root: Path, files: int, megabytes: int) -> int:
    """``files`` files of about equal size, ``megabytes`` MB in all, 20 to a directory, 3 levels deep; its bytes."""
    size = megabytes * 2**20 // files
    chunk = os.urandom(size)
    for i in range(files):
        directory = root / f"pkg{i // 2000}" / f"mod{i // 200 % 10}" / f"sub{i // 20 % 10}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"file{i}.py").write_bytes(chunk)
    return size * files


def _check(result: rollbox.ExecResult) -> None:
    if not result.ok:
        raise RuntimeError(f"`true` failed in the sandbox: {result.status.value} {result.error!r}")


def _meminfo_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


async def _measure(
    cases: dict[str, Callable[[], Awaitable[float]]], *, iterations: int, rounds: int
) -> dict[str, list[float]]:
    """Each case's times in ms (what its function returns), the cases interleaved round by round."""
    for run in cases.values():  # warm-up
        await run()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            for _ in range(iterations):
                samples[name].append(await cases[name]())
        print(f"  round {r + 1}/{rounds}", file=sys.stderr)
    return samples


async def _share(repo: Path, count: int, repo_bytes: int) -> dict[str, float]:
    """Open ``count`` sandboxes on ``repo`` at once, each reading all of it: memory and tree use."""
    before = _meminfo_available()
    boxes = [rollbox.Sandbox(limits=LIMITS, workspace=repo) for _ in range(count)]
    started = time.perf_counter()
    opened: list[rollbox.Sandbox] = []
    try:
        for i in range(0, count, 8):  # eight starts in flight, as bench_live.py does
            opened += await asyncio.gather(*(box.__aenter__() for box in boxes[i : i + 8]))
        opening_s = time.perf_counter() - started
        read = await asyncio.gather(
            *(sb.exec(["sh", "-c", "cat $(find . -type f | head -50) | wc -c"]) for sb in opened)
        )
        if not all(r.ok for r in read):
            raise RuntimeError(f"reading the workspace failed: {read[0]}")
        used = []
        for sb in opened:
            st = os.statvfs(sb._impl.writable_root)  # type: ignore[union-attr]
            used.append((st.f_blocks - st.f_bfree) * st.f_frsize)
        after = _meminfo_available()
        modes = {sb.workspace_mode for sb in opened}
    finally:
        await asyncio.gather(*(sb.close() for sb in opened))
    return {
        "sandboxes": count,
        "mode": ",".join(sorted(m or "" for m in modes)),
        "opening_s": opening_s,
        "memory_bytes_per_sandbox": (before - after) / count,
        "tree_bytes_per_sandbox_max": max(used),
        "copy_would_take_bytes_per_sandbox": repo_bytes,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--share", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="rollbox-bench-workspace-", dir=os.environ.get("TMPDIR", "/var/tmp")))
    try:
        repo = base / "repo"
        repo_bytes = make_repository(repo, args.files, args.megabytes)
        print(f"repository: {args.files} files, {repo_bytes / 2**20:.0f} MiB in {repo}", file=sys.stderr)
        pool = SandboxPool(size=1, limits=LIMITS, workspace=repo)
        await pool.__aenter__()
        try:

            async def empty() -> float:
                start = time.perf_counter()
                async with rollbox.Sandbox(limits=LIMITS) as sb:
                    _check(await sb.exec(["true"]))
                return (time.perf_counter() - start) * 1e3

            async def overlay() -> float:
                start = time.perf_counter()
                async with rollbox.Sandbox(limits=LIMITS, workspace=repo) as sb:
                    _check(await sb.exec(["true"]))
                    if sb.workspace_mode != "overlay":
                        raise RuntimeError(f"the workspace was not overlaid ({sb.workspace_mode})")
                return (time.perf_counter() - start) * 1e3

            async def copy() -> float:
                start = time.perf_counter()
                async with rollbox.Sandbox(limits=LIMITS) as sb:
                    await sb.write_tree(repo)
                    _check(await sb.exec(["true"]))
                return (time.perf_counter() - start) * 1e3

            async def reset_untouched() -> float:
                async with pool.sandbox() as sb:
                    _check(await sb.exec(["true"]))
                    start = time.perf_counter()
                    await sb.reset()
                    return (time.perf_counter() - start) * 1e3

            async def reset_changed() -> float:
                async with pool.sandbox() as sb:
                    _check(await sb.exec(["sh", "-c", "echo changed > pkg0/mod0/sub0/file0.py"]))
                    start = time.perf_counter()
                    await sb.reset()
                    return (time.perf_counter() - start) * 1e3

            cases = {
                "empty": empty,
                "overlay": overlay,
                "copy": copy,
                "reset, untouched": reset_untouched,
                "reset, one file changed": reset_changed,
            }
            samples = await _measure(cases, iterations=args.iterations, rounds=args.rounds)
        finally:
            await pool.close()
        share = await _share(repo, args.share, repo_bytes)
    finally:
        shutil.rmtree(base)

    medians = {name: statistics.median(times) for name, times in samples.items()}
    print(f"\n{'case':<28}{'median ms':>12}{'min ms':>10}{'max ms':>10}{'x empty':>10}")
    for name, times in samples.items():
        ratio = medians[name] / medians["empty"]
        print(f"{name:<28}{medians[name]:>12.2f}{min(times):>10.2f}{max(times):>10.2f}{ratio:>10.2f}")
    print(
        f"\n{share['sandboxes']} sandboxes open at once on the repository ({share['mode']}): opened in "
        f"{share['opening_s']:.2f} s, {share['memory_bytes_per_sandbox'] / 2**20:.2f} MiB of memory each, at most "
        f"{share['tree_bytes_per_sandbox_max'] / 2**10:.0f} KiB of each one's disk limit used; copying would put "
        f"{share['copy_would_take_bytes_per_sandbox'] / 2**20:.0f} MiB in each."
    )
    if args.json:
        args.json.write_text(json.dumps({"samples_ms": samples, "medians_ms": medians, "share": share}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
