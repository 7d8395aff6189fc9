"""The scheduler on a real Ray cluster (a head and two worker nodes) in a network namespace of the test's own, whose
only interface is loopback: a thousand jobs spread over both nodes; one node is killed mid-run; every job completes
exactly once, in the one job store; nothing of the cluster ever had an address outside the namespace.

The cluster is isolated from whatever Ray ran on this machine before: its processes get a home of their own (a
``~/.ray/auth_token`` another Ray run left turns token authentication on for a head started without
``RAY_AUTH_MODE``, but not for the nodes that join it, which then cannot), and none of the host's Ray variables.
Its token authentication is on: every node and the driver are given ``RAY_AUTH_MODE=token`` and the cluster's
token, as a real deployment passes it (test_ray_auth runs the backend with it off, and with it on but missing).

Ray 2.60's head advertises an address of the machine's own rather than the ``--node-ip-address 127.0.0.1`` it is
given, so on the host's network its nodes would talk off loopback. In a namespace with nothing but ``lo``, loopback
is the only address any of its processes can find, bind or reach. Its processes enter it with ``nsenter --net``
rather than ``ip netns exec``, which also remounts /sys for the namespace and so hides the cgroup hierarchies that
the nodes' sandboxes need.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollbox.sandbox.namespaces._backend import NamespaceHost
from rollbox.scheduler import JobState, JobStore

RAY = Path(sys.executable).with_name("ray")
DRIVER = Path(__file__).with_name("scheduler_ray_driver.py")
JOBS = 1000
SMALL = ["--object-store-memory", str(80 * 2**20), "--disable-usage-stats"]
LOOPBACK = ("127.0.0.1", "::1", "0.0.0.0", "::", "*")


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
    return found


def _kill_tree(pid: int) -> None:
    for member in _tree(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)


def _netns(pid: int) -> int | None:
    """The inode of ``pid``'s network namespace (``None`` once it is gone)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _interfaces(pid: int) -> set[str]:
    """The network interfaces of ``pid``'s namespace (none once it is gone)."""
    argv = ["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-o", "link"]
    shown = subprocess.run(argv, check=False, capture_output=True, text=True)
    return {line.split(":")[1].strip().split("@")[0] for line in shown.stdout.splitlines() if line.strip()}


@contextlib.contextmanager
def namespace() -> Iterator[str]:
    """A network namespace of this test's own with loopback up (iproute2's ``ip``), deleted when the block ends."""
    name = f"rbx-ray-{os.getpid()}-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)


def isolated_environment(home: Path, *, token: str | None, **extra: str) -> dict[str, str]:
    """This process's environment for a Ray cluster of a test's own: ``home`` as HOME (nothing of the user's
    ``~/.ray``), none of the host's Ray variables, the caches where they were, and, given a ``token``, Ray's token
    authentication on with that token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.setdefault("XDG_CACHE_HOME", str(Path.home() / ".cache"))  # rollbox's agent build, kept where it was
    env.update(HOME=str(home), RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", **extra)
    if token is not None:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    return env


class Cluster:
    """A head and worker nodes (a and b by default, each with 2 CPUs, 1 GiB and a resource of its own; with none,
    the head has the 2 CPUs), all started inside ``ns`` (``nsenter`` execs ``ray start`` in place: each pid is the
    node's ``ray start``), in :func:`isolated_environment` (``extra``: more variables for its nodes)."""

    def __init__(self, ns: str, temp: Path, logs: Path, *, token: str | None, **extra: str) -> None:
        self.ns, self.temp, self.logs = ns, temp, logs
        self.address = "127.0.0.1:6379"  # the namespace's own port space: nothing else listens in it
        (temp / "home").mkdir(exist_ok=True)
        self.env = isolated_environment(temp / "home", token=token)
        self.node_env = {**self.env, **extra}
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def inside(self, *argv: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.ns}", *argv]

    def start(self, nodes: tuple[str, ...] = ("a", "b")) -> None:
        """Start the nodes one after the other: Ray gives a node 30 s to register, which a loaded 2-core machine
        can miss when three start at once (a node that missed it is started again)."""
        self._start("head", "--head", "--port", "6379", "--num-cpus", "0" if nodes else "2", "--temp-dir",
                    str(self.temp), "--include-dashboard=false")  # fmt: skip
        for name in nodes:
            self._start(name, "--address", self.address, "--num-cpus", "2", "--memory", str(2**30),
                        "--resources", json.dumps({f"node_{name}": 100}))  # fmt: skip

    def _start(self, name: str, *options: str) -> None:
        log = self.logs / f"ray-{name}.log"
        for _ in range(3):
            with log.open("ab") as out:
                argv = [str(RAY), "start", "--block", "--node-ip-address", "127.0.0.1", *options, *SMALL]
                process = subprocess.Popen(self.inside(*argv), stdout=out, stderr=out, env=self.node_env)
            self.started[name] = process
            deadline = time.monotonic() + 120
            while process.poll() is None and b"Ray runtime started" not in log.read_bytes():
                assert time.monotonic() < deadline, f"ray node {name} did not start: see {log}"
                time.sleep(0.2)
            if process.poll() is None:
                return
            _kill_tree(process.pid)
        raise AssertionError(f"ray node {name} failed to start three times: see {log}")

    def processes(self) -> list[int]:
        return [pid for process in self.started.values() for pid in _tree(process.pid)]

    def stop(self) -> None:
        for process in self.started.values():
            _kill_tree(process.pid)
            process.wait()


@contextlib.contextmanager
def started_cluster(
    logs: Path, *, token: str | None, nodes: tuple[str, ...] = ("a", "b"), **extra: str
) -> Iterator[Cluster]:
    """A :class:`Cluster` in a namespace of its own, stopped and cleaned up at the end of the block."""
    # A short directory of its own: Ray's unix sockets live under it, and their paths may not exceed 107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="rbx-ray-", dir="/tmp"))
    with namespace() as ns:
        running = Cluster(ns, temp, logs, token=token, **extra)
        try:
            running.start(nodes)
            yield running
        finally:
            running.stop()
            shutil.rmtree(temp, ignore_errors=True)
            # The nodes were killed with their sandboxes' supervisors: what those left (cgroups, state directories)
            # is reaped as the next rollbox process on this machine would.
            host = NamespaceHost.get()
            host.state.reap(host.cgroups)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Two nodes and a head, with token authentication on."""
    with started_cluster(tmp_path, token=secrets.token_hex(32)) as running:
        yield running


def _results(store: Path) -> int:
    try:
        with sqlite3.connect(store, timeout=30) as db:
            return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
    except sqlite3.OperationalError:  # not made yet
        return 0


def _listening(cluster: Cluster) -> list[str]:
    """The local address of every TCP socket in the namespace (``ss -tanp``, run inside it)."""
    shown = subprocess.run(cluster.inside("ss", "-tanH"), check=True, capture_output=True, text=True).stdout
    return [line.split()[3] for line in shown.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_thousand_jobs_over_two_nodes_one_killed_midway_each_completes_once(tmp_path: Path, cluster: Cluster) -> None:
    home = tmp_path / "home"
    home.mkdir()
    ns_inode = os.stat(f"/run/netns/{cluster.ns}").st_ino
    driver = subprocess.Popen(
        cluster.inside(sys.executable, str(DRIVER), cluster.address, str(home), str(JOBS)),
        env=cluster.env,
    )
    try:
        deadline = time.monotonic() + 400
        addresses: set[str] = set()
        while _results(home / "jobs.db") < 300:
            assert driver.poll() is None, f"the driver ended early (status {driver.returncode})"
            assert time.monotonic() < deadline, "the cluster made no progress"
            addresses.update(_listening(cluster))
            time.sleep(0.2)
        # Every process of the cluster and the driver lives in the namespace, and binds only loopback there.
        # The others are in the sandboxes the nodes made, whose own namespaces have nothing but loopback either.
        everyone = {pid: _netns(pid) for pid in [*cluster.processes(), *_tree(driver.pid)]}
        assert ns_inode in everyone.values()
        sandboxed = {inode: pid for pid, inode in everyone.items() if inode not in (None, ns_inode)}
        assert sandboxed and all(_interfaces(pid) <= {"lo"} for pid in sandboxed.values())
        addresses.update(_listening(cluster))
        hosts = {address.rsplit(":", 1)[0].strip("[]").split("%")[0].removeprefix("::ffff:") for address in addresses}
        assert hosts and hosts <= set(LOOPBACK), hosts

        _kill_tree(cluster.started["b"].pid)  # node b dies with its raylet, its actor and its sandboxes
        assert driver.wait(timeout=400) == 0
    finally:
        _kill_tree(driver.pid)
        driver.wait()

    nodes = json.loads((home / "nodes.json").read_text())
    assert nodes["addresses"] == ["127.0.0.1"]  # what Ray itself says of its nodes
    names = {("a" if "node_a" in resources else "b"): name for name, resources in nodes["workers"].items()}
    store = JobStore(home / "jobs.db")
    try:
        assert {(r.state, r.status) for _, r in store.results()} == {(JobState.COMPLETED, "ok")}
        on_a = [r for job, r in store.results() if job.key and job.key.startswith("a")]
        assert len(on_a) == 20 and {r.output["node"] for r in on_a} == {names["a"]}
        results = [(job, r) for job, r in store.results() if not (job.key or "").startswith("a")]
        assert len(results) == JOBS and len({job.id for job, _ in results}) == JOBS
        assert sorted(int(r.output["stdout"]) for _, r in results) == list(range(JOBS))
        by_node = Counter(r.output["node"] for _, r in results)
        assert set(by_node) == {names["a"], names["b"]} and min(by_node.values()) >= 100  # the work spread
        # The attempts under way on node b when it died were lost with it, and retried on a; none was lost on a.
        # (An attempt may also fail for rollbox's own reasons, and be retried like any other: that is not a loss.)
        failed = [a for job, _ in results for a in store.attempts(job.id) if a.outcome == "infra_error"]
        lost = [a for a in failed if "was lost" in (a.error or "")]
        assert lost, ("no attempt was lost with node b", [(a.job_id, a.worker, a.error) for a in failed])
        assert {a.worker for a in lost} == {names["b"]}, (names, [(a.job_id, a.worker, a.error) for a in lost])
    finally:
        store.close()
