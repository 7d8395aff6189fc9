#!/usr/bin/env python3
"""Run a command inside a guard cgroup with a memory and a pids cap, then remove it.

    python3 scripts/guard.py [--memory 6G] [--pids 4096] -- pytest ...

The test suite attacks rollbox's sandbox with fork bombs and memory bombs. If the sandbox were broken, those
would hit the machine; under the guard they hit the guard's caps and fail a test instead. Every sandbox the
command makes nests inside the guard (v1: under the command's own cgroup; v2: under ``<guard>/sandboxes``,
passed as ROLLBOX_CGROUP_PARENT), so the caps bound them too. Deliberately independent of rollbox's own cgroup
code: a bug there must not disable the guard. On exit, whatever is left in the guard is killed and the guard
removed; the exit status is the command's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SIZES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(text: str) -> int:
    return int(float(text[:-1]) * SIZES[text[-1].upper()]) if text[-1].upper() in SIZES else int(text)


def _cgroup_mounts() -> dict[str, Path]:
    mounts: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fstype, _src, options = after.split(" ")[:3]
        point = Path(before.split(" ")[4])
        if fstype == "cgroup2":
            mounts.setdefault("unified", point)
        elif fstype == "cgroup":
            for controller in ("memory", "pids", "cpuacct"):
                if controller in options.split(","):
                    mounts.setdefault(controller, point)
    return mounts


def _own(controller: str) -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _id, names, path = line.split(":", 2)
        if (controller == "unified" and names == "") or controller in names.split(","):
            return path
    return "/"


def _make_guard(memory: int, pids: int) -> tuple[list[Path], list[Path], dict[str, str]]:
    """Create the guard. Returns (directories to remove, cgroup.procs files to join, extra environment)."""
    mounts = _cgroup_mounts()
    name = f"rollbox-guard-{os.getpid()}"
    unified = mounts.get("unified")
    if unified and {"memory", "pids"} <= set((unified / "cgroup.controllers").read_text().split()):
        # The root may not hand the controllers down yet (a fresh mount without systemd): it always may.
        (unified / "cgroup.subtree_control").write_text("+memory +pids")
        guard = unified / name
        runner, sandboxes = guard / "runner", guard / "sandboxes"
        guard.mkdir()
        try:
            (guard / "memory.max").write_text(str(memory))
            (guard / "pids.max").write_text(str(pids))
            (guard / "cgroup.subtree_control").write_text("+memory +pids")
            runner.mkdir()
            sandboxes.mkdir()
            (sandboxes / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError:
            for directory in (sandboxes, runner, guard):
                if directory.exists():
                    directory.rmdir()
            raise
        env = {"ROLLBOX_CGROUP_PARENT": f"/{name}/sandboxes"}
        return [sandboxes, runner, guard], [runner / "cgroup.procs"], env
    dirs: list[Path] = []
    for controller in ("memory", "pids", "cpuacct"):
        d = mounts[controller] / _own(controller).lstrip("/") / name
        d.mkdir()
        dirs.append(d)
    memsw = dirs[0] / "memory.memsw.limit_in_bytes"
    (dirs[0] / "memory.limit_in_bytes").write_text(str(memory))
    if memsw.exists():
        memsw.write_text(str(memory))
    (dirs[1] / "pids.max").write_text(str(pids))
    return dirs, [d / "cgroup.procs" for d in dirs], {}


def _empty(directory: Path) -> None:
    """Kill every process left in ``directory`` and its children, deepest first, and remove them."""
    for child in sorted((p for p in directory.iterdir() if p.is_dir()), reverse=True):
        _empty(child)
    for _ in range(1000):
        pids = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
        if not pids:
            break
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)  # pinned: a reused pid outside the guard is never signalled
            except ProcessLookupError:
                continue
            try:
                if directory.name in Path(f"/proc/{pid}/cgroup").read_text():
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            except (ProcessLookupError, FileNotFoundError):
                pass
            finally:
                os.close(fd)
        time.sleep(0.01)
    for _ in range(500):
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory", default="6G", help="memory cap for the command and its sandboxes")
    parser.add_argument("--pids", type=int, default=4096, help="process and thread cap")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given")
    if os.geteuid() != 0:
        print("guard: not root; running without a guard cgroup", file=sys.stderr)
        return subprocess.call(cmd)
    dirs, procs, env = _make_guard(_size(args.memory), args.pids)
    try:
        child = subprocess.Popen(
            cmd,
            env={**os.environ, **env},
            preexec_fn=lambda: [p.write_text(str(os.getpid())) for p in procs] and None,  # noqa: PLW1509
        )
        try:
            return child.wait()
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)
            return child.wait()
    finally:
        for d in dirs:
            _empty(d)


if __name__ == "__main__":
    sys.exit(main())
