#!/usr/bin/env python3
"""What a workspace costs a sandbox: an empty one, a large repository overlaid (``Sandbox(workspace=...)``), and
the same repository copied in (``write_tree``, the way without overlays), side by side in one run.

    python bench/bench_workspace.py [--files N] [--megabytes M] [--iterations N] [--rounds R] [--share N]
                                    [--json PATH]
    python bench/bench_workspace.py --grade [--files N] [--megabytes M] [--iterations N] [--rounds R]

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

With ``--grade``, instead: what an episode's end costs on a task whose workspace is REPO (a pytest task), after
a sandbox on REPO changed one file: the time from the end of that command to the verdict, both ways side by side,

- ``changes, overlaid grading``: ``read_changes`` (the overlay's upper layer: one file), the judge's diff of
  those changes, and a grading sandbox that starts over REPO with the one file laid in (what rollbox does);
- ``whole tree, copied grading``: ``read_tree`` of all /workspace, the judge's diff of the whole tree, and a
  grading tree built whole and copied into the grading sandbox (the way before; forced here by raising the
  judge's copy threshold).

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
import rollbox.judge._grade as judge_grade
from rollbox.judge import VerdictStatus, grade
from rollbox.sandbox import Limits, SandboxPool
from rollbox.tasks import load_task

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


async def _grade_cases(base: Path, files: int, megabytes: int, iterations: int, rounds: int) -> dict[str, list[float]]:
    """An episode's end on a repository task, one file changed: changes and overlay, or whole tree and copy."""
    root = base / "task"
    repo_bytes = make_repository(root / "workspace", files, megabytes)
    (root / "tests").mkdir()
    changed = "pkg0/mod0/sub0/file0.py"
    (root / "tests" / "test_repo.py").write_text(
        f"def test_changed():\n    assert open('/workspace/{changed}').read() == 'changed\\n'\n"
    )
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\n[limits]\ntimeout = "60s"\ndisk = "512M"\n')
    task = load_task(root)
    print(f"task repository: {files} files, {repo_bytes / 2**20:.0f} MiB", file=sys.stderr)
    copy_max = judge_grade._COPY_MAX_ENTRIES, judge_grade._COPY_MAX_BYTES

    def ending(whole: bool) -> Callable[[], Awaitable[float]]:
        async def run() -> float:
            out = Path(tempfile.mkdtemp(prefix="rollbox-bench-end-", dir="/dev/shm"))
            try:
                async with rollbox.Sandbox(limits=LIMITS, workspace=task.workspace) as sb:
                    _check(await sb.exec(["sh", "-c", f"echo changed > {changed}"]))
                    start = time.perf_counter()
                    if whole:
                        judge_grade._COPY_MAX_ENTRIES, judge_grade._COPY_MAX_BYTES = 10**12, 10**15
                        await sb.read_tree(out / "workspace")
                        verdict = await grade(task, out / "workspace")
                    else:
                        verdict = await grade(task, await sb.read_changes(out / "workspace"))
                    elapsed = (time.perf_counter() - start) * 1e3
            finally:
                judge_grade._COPY_MAX_ENTRIES, judge_grade._COPY_MAX_BYTES = copy_max
                shutil.rmtree(out)
            if verdict.status is not VerdictStatus.PASSED:
                raise RuntimeError(f"the change was not graded as passing: {verdict}")
            return elapsed

        return run

    cases = {"changes, overlaid grading": ending(False), "whole tree, copied grading": ending(True)}
    return await _measure(cases, iterations=iterations, rounds=rounds)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--share", type=int, default=100)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--grade", action="store_true", help="time an episode's end on a repository task instead")
    args = parser.parse_args()
    if args.grade:
        base = Path(tempfile.mkdtemp(prefix="rollbox-bench-grade-", dir=os.environ.get("TMPDIR", "/var/tmp")))
        try:
            samples = await _grade_cases(base, args.files, args.megabytes, args.iterations, args.rounds)
        finally:
            shutil.rmtree(base)
        print(f"\n{'case':<30}{'median ms':>12}{'min ms':>10}{'max ms':>10}")
        for name, times in samples.items():
            print(f"{name:<30}{statistics.median(times):>12.1f}{min(times):>10.1f}{max(times):>10.1f}")
        print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        if args.json:
            args.json.write_text(json.dumps({"samples_ms": samples}, indent=2))
        return

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
