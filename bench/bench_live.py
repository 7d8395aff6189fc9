#!/usr/bin/env python3
"""Live sandboxes at scale: open N at once, then measure memory, creation rate, exec latency and what runs out.

    python bench/bench_live.py [--sandboxes 1000 10000] [--per-process 4000] [--rounds 1] [--json PATH]

Each size is a case, run side by side in one invocation (alternating, ``--rounds`` times). A case's sandboxes are
opened by worker processes of at most ``--per-process`` sandboxes each (a process holds four descriptors per live
sandbox, and its hard open files limit bounds it: ``rollbox doctor`` says how many), all creating at once, then all
kept open while each worker in turn times its execs. What it reports (the targets of the density issue in brackets):

- creation rate: N sandboxes opened with ``--concurrency`` creations in flight per worker [>= 500 per second];
- memory per idle sandbox: the drop in the host's MemAvailable once all are open and settled, divided by N
  [<= 1 MiB], with where it went (/proc/meminfo: slab, unreclaimable slab, page tables, kernel stacks, processes'
  pages, per-CPU; /proc/slabinfo's kmalloc-1k, where the kernel keeps each memory cgroup's array over every
  filesystem's shrinker, which grows with sandboxes times filesystems);
- exec of ``true`` in a live sandbox, round-robin over a worker's sandboxes while all N are open: p50 and p99
  [<= 2 ms, <= 5 ms]; then, in the same worker, a bare ``posix_spawn`` + ``waitpid`` of ``/usr/bin/true`` (the floor);
- what each sandbox takes of each limit, measured: host descriptors, processes and threads, memory cgroups, and
  each limit's numbers (RLIMIT_NOFILE, kernel.pid_max, kernel.threads-max, memory cgroup ids);
- the machine's CPU per creation and per exec (``/proc/stat``: user, system and interrupt time of all CPUs), the
  CPU of this run's own cgroup per creation and per exec (workers, spawners, launchers, agents, commands: what the
  case spent, whatever else runs on the machine), the worker's own CPU per exec (its event loop and the host side
  of the command), and pid 1's CPU per creation and per exec (a container's supervisor as pid 1 may look at every
  process on every fork: with tens of thousands of processes, milliseconds each);
- the worker's cyclic garbage collections during its execs: how many, and the longest (a pause of the event loop);
- pool hand-out and in-place reset, p50, in the first worker of the smallest case.

Run it under the guard with room for N sandboxes (three processes each, about a MiB and a half of memory each):
``python3 scripts/guard.py --pids 32000 --memory 20G -- python bench/bench_live.py --sandboxes 1000 10000``.
The load average is recorded before and after each case. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TARGETS = {"creation_per_s": 500.0, "memory_mib_per_sandbox": 1.0, "exec_p50_ms": 2.0, "exec_p99_ms": 5.0}
_MEMINFO = ("Slab", "SUnreclaim", "PageTables", "KernelStack", "AnonPages", "Percpu", "Shmem")


# ------------------------------------------------------------------------------------------ the machine's figures


def _meminfo() -> dict[str, int]:
    with open("/proc/meminfo") as f:
        return {line.split(":")[0]: int(line.split()[1]) << 10 for line in f}


def _slab(name: str) -> int:
    try:
        with open("/proc/slabinfo") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] == name:
                    return int(fields[2]) * int(fields[3])
    except OSError:
        pass
    return 0


def _machine_cpu_ms() -> float:
    """Busy milliseconds of all CPUs so far: user + nice + system + irq + softirq."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    return sum(ticks[i] for i in (0, 1, 2, 5, 6)) * 1000 / os.sysconf("SC_CLK_TCK")


def _cgroup_cpu_ms() -> float:
    """CPU milliseconds of every process in this process's cgroup (its workers, their spawners, launchers, agents and
    commands, under the guard): what the case itself spent, whatever else the machine runs."""
    with open("/proc/self/cgroup") as f:
        paths = {names: path for _id, names, path in (line.rstrip("\n").split(":", 2) for line in f)}
    for names, path in paths.items():
        if "cpuacct" in names.split(","):
            return _read_int(f"/sys/fs/cgroup/cpuacct{path}/cpuacct.usage") / 1e6
    with open(f"/sys/fs/cgroup{paths['']}/cpu.stat") as f:
        return int(f.readline().split()[1]) / 1000


def _init_cpu_ms() -> float:
    """CPU milliseconds of the machine's pid 1 so far. Some init processes (a container's supervisor) look at every
    process on every process event: with tens of thousands of processes that costs them milliseconds per fork."""
    with open("/proc/1/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _tasks() -> int:
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[1])


def _memory_cgroups() -> int:
    with open("/proc/cgroups") as f:
        return next(int(line.split()[2]) for line in f if line.startswith("memory\t"))


def _read_int(path: str) -> int:
    with open(path) as f:
        return int(f.read())


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ------------------------------------------------------------------------------------------------------ a worker


class Worker:
    """A process holding its share of a case's sandboxes, driven line by line over its stdin and stdout."""

    def __init__(self, concurrency: int) -> None:
        import rollbox

        self.rollbox = rollbox
        self.limits = rollbox.Limits(disk_bytes=16 << 20)
        self.concurrency = concurrency
        self.sandboxes: list[Any] = []

    async def open(self, count: int) -> dict[str, Any]:
        gate = asyncio.Semaphore(self.concurrency)
        fds_before = len(os.listdir("/proc/self/fd"))

        async def one() -> None:
            async with gate:
                sandbox = self.rollbox.Sandbox(limits=self.limits)
                await sandbox.__aenter__()
                self.sandboxes.append(sandbox)

        start = time.perf_counter()
        results = await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
        seconds = time.perf_counter() - start
        errors = [str(r) for r in results if isinstance(r, BaseException)]
        for sandbox in self.sandboxes:  # each with its next command's process ready, as an idle sandbox is
            if sandbox._spare is not None:
                await sandbox._spare
        fds = (len(os.listdir("/proc/self/fd")) - fds_before) / max(1, len(self.sandboxes))
        return {"opened": len(self.sandboxes), "seconds": seconds, "errors": errors[:3], "fds_each": fds}

    async def execs(self, count: int) -> dict[str, Any]:
        samples: list[float] = []
        pauses: list[float] = []  # the interpreter's cyclic garbage collections meanwhile, in ms
        started: list[float] = []

        def timed(phase: str, _info: dict[str, int]) -> None:
            if phase == "start":
                started.append(time.perf_counter())
            elif started:
                pauses.append((time.perf_counter() - started.pop()) * 1000)

        gc.callbacks.append(timed)
        machine, own = _machine_cpu_ms(), time.process_time()
        for i in range(count):
            start = time.perf_counter()
            result = await self.sandboxes[i % len(self.sandboxes)].exec(["true"])
            samples.append((time.perf_counter() - start) * 1000)
            if not result.ok:
                return {"error": f"exec failed in a live sandbox: {result}"}
        machine_ms, own_ms = _machine_cpu_ms() - machine, (time.process_time() - own) * 1000
        gc.callbacks.remove(timed)
        return {
            "samples": samples,
            "machine_cpu_ms": machine_ms / count,
            "own_cpu_ms": own_ms / count,
            "gc_pauses_ms": pauses,
        }

    async def bare(self, count: int) -> dict[str, Any]:
        """A bare ``posix_spawn`` + ``waitpid`` of /usr/bin/true from this process, ``count`` times (the floor)."""
        samples: list[float] = []
        for _ in range(count):
            start = time.perf_counter()
            os.waitpid(os.posix_spawn("/usr/bin/true", ["true"], {}), 0)
            samples.append((time.perf_counter() - start) * 1000)
        return {"samples": samples}

    async def pool(self, rounds: int) -> dict[str, Any]:
        """p50 of handing a warm sandbox out, and of an in-place reset after a command."""
        out: list[float] = []
        resets: list[float] = []
        async with self.rollbox.SandboxPool(size=2, limits=self.limits) as pool:
            for _ in range(rounds):
                await asyncio.sleep(0.01)  # an episode's worth of pause: the last return's reset ends meanwhile
                start = time.perf_counter()
                async with pool.sandbox() as sb:
                    out.append((time.perf_counter() - start) * 1000)
                    await sb.exec(["true"])
        async with self.rollbox.Sandbox(limits=self.limits) as sb:
            for _ in range(rounds):
                await sb.exec(["true"])
                start = time.perf_counter()
                await sb.reset()
                resets.append((time.perf_counter() - start) * 1000)
        return {"handout_p50_ms": statistics.median(out), "reset_p50_ms": statistics.median(resets)}

    async def close(self) -> dict[str, Any]:
        start = time.perf_counter()
        for sandbox in self.sandboxes:
            await sandbox.close()
        count, self.sandboxes = len(self.sandboxes), []
        return {"closed": count, "seconds": time.perf_counter() - start}

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command, *arguments = line.split()
            reply = await getattr(self, command)(*map(int, arguments))
            print(json.dumps(reply), flush=True)


class _Remote:
    """The orchestrator's end of a worker process."""

    def __init__(self, concurrency: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", "--concurrency", str(concurrency)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def send(self, command: str, *arguments: int) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(" ".join([command, *map(str, arguments)]) + "\n")
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"a worker ended (exit {self.process.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ask(self, command: str, *arguments: int) -> dict[str, Any]:
        self.send(command, *arguments)
        return self.receive()

    def end(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


# ------------------------------------------------------------------------------------------------------ one case


def _case(sandboxes: int, args: argparse.Namespace, pool: bool) -> dict[str, Any]:
    workers = [_Remote(args.concurrency) for _ in range(math.ceil(sandboxes / args.per_process))]
    shares = [sandboxes // len(workers) + (i < sandboxes % len(workers)) for i in range(len(workers))]
    load_before = os.getloadavg()
    time.sleep(1)  # the workers' interpreters start
    memory, kmalloc_1k, tasks, memcgs = _meminfo(), _slab("kmalloc-1k"), _tasks(), _memory_cgroups()
    cpu, own_cpu, init_cpu, start = _machine_cpu_ms(), _cgroup_cpu_ms(), _init_cpu_ms(), time.perf_counter()
    try:
        for worker, share in zip(workers, shares, strict=True):  # all create at once
            worker.send("open", share)
        opened = [worker.receive() for worker in workers]
        creation_s, creation_cpu = time.perf_counter() - start, _machine_cpu_ms() - cpu
        creation_own_cpu, creation_init_cpu = _cgroup_cpu_ms() - own_cpu, _init_cpu_ms() - init_cpu
        total = sum(o["opened"] for o in opened)
        errors = [e for o in opened for e in o["errors"]]
        time.sleep(2)  # deferred kernel work (namespace setup, RCU, page cache) settles
        after = _meminfo()
        report: dict[str, Any] = {
            "sandboxes": total,
            "asked": sandboxes,
            "processes": len(workers),
            "errors": errors,
            "creation_per_s": total / creation_s,
            "creation_cpu_ms": creation_cpu / max(1, total),
            "creation_own_cpu_ms": creation_own_cpu / max(1, total),
            "creation_init_cpu_ms": creation_init_cpu / max(1, total),
            "memory_mib_per_sandbox": (memory["MemAvailable"] - after["MemAvailable"]) / max(1, total) / 2**20,
            "memory_kib_each": {k: (after[k] - memory[k]) / max(1, total) / 1024 for k in _MEMINFO if k in memory},
            "kmalloc_1k_kib_each": (_slab("kmalloc-1k") - kmalloc_1k) / max(1, total) / 1024,
            "fds_each": statistics.mean(o["fds_each"] for o in opened),
            "tasks_each": (_tasks() - tasks) / max(1, total),
            "memory_cgroups_each": (_memory_cgroups() - memcgs) / max(1, total),
            "limits": {
                "RLIMIT_NOFILE (per process)": resource.getrlimit(resource.RLIMIT_NOFILE),
                "kernel.pid_max": _read_int("/proc/sys/kernel/pid_max"),
                "kernel.threads-max": _read_int("/proc/sys/kernel/threads-max"),
                "tasks on the machine": _tasks(),
                "memory cgroups (of 65,535)": _memory_cgroups(),
            },
        }
        if total:
            samples: list[float] = []
            bare: list[float] = []
            machine_cpu: list[float] = []
            worker_cpu: list[float] = []
            pauses: list[float] = []
            own_each: list[float] = []
            init_each: list[float] = []
            for worker in workers:  # one at a time, the others idle, all sandboxes open
                own_before, init_before = _cgroup_cpu_ms(), _init_cpu_ms()
                timed = worker.ask("execs", args.execs)
                own_each.append((_cgroup_cpu_ms() - own_before) / args.execs)
                init_each.append((_init_cpu_ms() - init_before) / args.execs)
                if "error" in timed:
                    raise SystemExit(timed["error"])
                samples += timed["samples"]
                machine_cpu.append(timed["machine_cpu_ms"])
                worker_cpu.append(timed["own_cpu_ms"])
                pauses += timed["gc_pauses_ms"]
                bare += worker.ask("bare", args.execs)["samples"]
            report |= {
                "exec_p50_ms": statistics.median(samples),
                "exec_p99_ms": _percentile(samples, 0.99),
                "bare_spawn_p50_ms": statistics.median(bare),
                "exec_cpu_ms": statistics.mean(machine_cpu),
                "exec_worker_cpu_ms": statistics.mean(worker_cpu),
                "exec_own_cpu_ms": statistics.mean(own_each),
                "exec_init_cpu_ms": statistics.mean(init_each),
                "gc_pauses_during_execs": len(pauses),
                "gc_pause_max_ms": max(pauses, default=0.0),
            }
            if pool:
                pooled = workers[0].ask("pool", 200)
                report |= {"pool_handout_p50_ms": pooled["handout_p50_ms"], "reset_p50_ms": pooled["reset_p50_ms"]}
    finally:
        start = time.perf_counter()
        for worker in workers:
            worker.send("close")
        closed = sum(worker.receive()["closed"] for worker in workers)
        close_s = time.perf_counter() - start
        for worker in workers:
            worker.end()
    report |= {"close_per_s": closed / close_s, "load_before": load_before, "load_after": os.getloadavg()}
    return report


def _print(report: dict[str, Any]) -> None:
    print(
        f"{report['sandboxes']} live sandboxes ({report['processes']} processes); load {report['load_before'][0]:.2f}"
        f" -> {report['load_after'][0]:.2f}"
    )
    for error in report["errors"]:
        print(f"  ERROR {error}")
    for key, value in report.items():
        if not isinstance(value, float | int) or key in ("sandboxes", "asked", "processes", "round"):
            continue
        target = TARGETS.get(key)
        verdict = ""
        if target is not None:
            met = value >= target if key == "creation_per_s" else value <= target
            verdict = f"  target {'>=' if key == 'creation_per_s' else '<='} {target:g}: {'PASS' if met else 'MISS'}"
        print(f"  {key:24s} {value:10.2f}{verdict}")
    print("  memory KiB each: " + ", ".join(f"{k} {v:.0f}" for k, v in report["memory_kib_each"].items()))
    print(f"  limits: {report['limits']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxes", type=int, nargs="+", default=[1000], help="case sizes, side by side (1000)")
    parser.add_argument("--per-process", type=int, default=4000, help="most sandboxes per worker process (4000)")
    parser.add_argument("--concurrency", type=int, default=8, help="creations in flight per worker (8)")
    parser.add_argument("--execs", type=int, default=1000, help="execs of `true` per worker, round-robin (1000)")
    parser.add_argument("--rounds", type=int, default=1, help="times each case runs, alternating (1)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every case's figures here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(Worker(args.concurrency).serve())
        return
    reports = []
    for round_ in range(args.rounds):
        for size in args.sandboxes:
            report = _case(size, args, pool=round_ == 0 and size == min(args.sandboxes))
            report["round"] = round_
            _print(report)
            reports.append(report)
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1) + "\n")


if __name__ == "__main__":
    main()
