"""The sandbox's API and ordinary behaviour: lifecycle, files, environment, statuses, cleanup, reaping."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import rollbox
from rollbox import ExecResult, Limits, Sandbox, SandboxStateError, Status
from rollbox.sandbox.agent._protocol import Usage, classify

FAST = Limits(timeout_s=5, cpu_time_s=2, memory_bytes=128 * 2**20, pids=32, disk_bytes=16 * 2**20)


def test_exec_reports_output_exit_code_and_usage() -> None:
    async def main() -> ExecResult:
        async with Sandbox(limits=FAST) as sb:
            return await sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])

    r = asyncio.run(main())
    assert (r.status, r.exit_code, r.signal) == (Status.NONZERO_EXIT, 3, None)
    assert (r.stdout, r.stderr) == (b"out\n", b"err\n")
    assert r.wall_s > 0 and r.cpu_s > 0 and r.peak_memory_bytes and r.peak_memory_bytes > 0
    assert r.error is None


def test_state_persists_in_files_between_commands() -> None:
    async def main() -> list[ExecResult]:
        async with Sandbox(limits=FAST) as sb:
            await sb.write_file("pkg/helper.py", "def answer():\n    return 42\n")
            first = await sb.exec(["sh", "-c", "echo made > made.txt; echo scratch > /tmp/s"])
            second = await sb.exec(["python3", "-c", "from pkg.helper import answer; print(answer())"])
            third = await sb.exec(["cat", "made.txt", "/tmp/s"])
            assert await sb.read_file("made.txt") == b"made\n"
            assert await sb.read_file("/tmp/s") == b"scratch\n"
            return [first, second, third]

    first, second, third = asyncio.run(main())
    assert first.ok and second.stdout == b"42\n" and third.stdout == b"made\nscratch\n"


def test_environment_is_scrubbed_and_explicit() -> None:
    os.environ["ROLLBOX_TEST_SECRET"] = "do-not-leak"
    try:
        r = asyncio.run(rollbox.run(["sh", "-c", "env | sort"], limits=FAST))
    finally:
        del os.environ["ROLLBOX_TEST_SECRET"]
    names = {line.split("=", 1)[0] for line in r.stdout_text.splitlines()}
    assert "ROLLBOX_TEST_SECRET" not in r.stdout_text
    assert {"PATH", "HOME", "TMPDIR", "LANG"} <= names
    assert "HOME=/workspace" in r.stdout_text


def test_python3_is_the_interpreter_rollbox_runs_on_mounted_under_opt_rollbox() -> None:
    # Its installed packages too (pytest is one), wherever the host keeps them: never under /tmp or /workspace.
    from conftest import TIME_SCALE

    code = "import sys, pytest; print(sys.version_info[:3], sys.prefix, pytest.__file__.startswith(sys.prefix))"
    # Importing pytest takes over 2 s of CPU in the emulated VM, the first time; FAST's limits, scaled.
    limits = Limits(timeout_s=5 * TIME_SCALE, cpu_time_s=2 * TIME_SCALE, memory_bytes=128 * 2**20)
    r = asyncio.run(rollbox.run(["python3", "-c", code], limits=limits))
    assert r.stdout_text.strip() == f"{tuple(sys.version_info[:3])} /opt/rollbox/env True", r


def test_stdin_is_empty_unless_given() -> None:
    async def main() -> tuple[ExecResult, ExecResult]:
        async with Sandbox(limits=FAST) as sb:
            return await sb.exec(["cat"]), await sb.exec(["cat"], stdin="fed\n")

    empty, fed = asyncio.run(main())
    assert empty.ok and empty.stdout == b""
    assert fed.stdout == b"fed\n"


def test_missing_program_is_the_programs_failure() -> None:
    r = asyncio.run(rollbox.run(["no-such-program"], limits=FAST))
    assert (r.status, r.exit_code) == (Status.NONZERO_EXIT, 127)
    assert b"no-such-program" in r.stderr


def test_per_exec_timeout_overrides_the_limit() -> None:
    from conftest import TIME_SCALE

    async def main() -> ExecResult:
        async with Sandbox(limits=FAST) as sb:
            return await sb.exec(["sleep", "10"], timeout_s=0.3)

    r = asyncio.run(main())
    assert r.status is Status.TIMEOUT
    assert 0.3 <= r.wall_s < 2 * TIME_SCALE  # the time to kill and reap is slower where emulated


def test_loopback_network_is_the_sandboxs_own() -> None:
    code = textwrap.dedent("""
        import socket, threading
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]
        threading.Thread(target=lambda: server.accept()[0].sendall(b"pong"), daemon=True).start()
        print(socket.create_connection(("127.0.0.1", port)).recv(4).decode())
    """)
    from conftest import TIME_SCALE

    # An ordinary program's budget: where the CPU is emulated, Python's start alone takes about a second of it.
    limits = dataclasses.replace(FAST, cpu_time_s=2 * TIME_SCALE, timeout_s=5 * TIME_SCALE)
    r = asyncio.run(rollbox.run(["python3", "-c", code], limits=limits, network="loopback"))
    assert r.ok, r.stderr_text
    assert r.stdout == b"pong\n"


def test_lifecycle_misuse_raises_with_a_fix() -> None:
    async def main() -> None:
        sb = Sandbox(limits=FAST)
        with pytest.raises(SandboxStateError, match="async with"):
            await sb.exec(["true"])
        async with sb:
            pass
        with pytest.raises(SandboxStateError, match="closed"):
            await sb.exec(["true"])
        with pytest.raises(SandboxStateError, match="only once"):
            await sb.__aenter__()
        await sb.close()  # idempotent

    asyncio.run(main())


def test_bad_arguments_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="positive"):
        Limits(memory_bytes=0)
    with pytest.raises(ValueError, match="unknown backend"):
        Sandbox(backend="docker")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'bwrap' is now 'namespaces'"):
        Sandbox(backend="bwrap")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="none"):
        Sandbox(network="internet")

    async def main() -> None:
        async with Sandbox(limits=FAST) as sb:
            with pytest.raises(ValueError, match="outside"):
                await sb.write_file("/etc/passwd", "x")
            with pytest.raises(ValueError, match=r"\.\."):
                await sb.read_file("../escape")
            with pytest.raises(ValueError, match="NUL"):
                await sb.exec(["echo", "a\0b"])
            with pytest.raises(ValueError, match="program"):
                await sb.exec([])

    asyncio.run(main())


def test_close_leaves_nothing_behind() -> None:
    from conftest import STATE_DIR, rollbox_mounts

    async def main() -> tuple[str, list[Path]]:
        async with Sandbox(limits=FAST) as sb:
            await sb.exec(["sh", "-c", "(sleep 100 &); echo started"])
            impl = sb._impl
            assert impl is not None
            return impl.id, [Path(d) for d in impl._cgroup.dirs]  # type: ignore[attr-defined]

    sandbox_id, cgroup_dirs = asyncio.run(main())
    assert not (STATE_DIR / "sandboxes" / sandbox_id).exists()
    assert not any(d.exists() for d in cgroup_dirs)
    assert not [m for m in rollbox_mounts() if sandbox_id in m]


def test_a_sandbox_that_cannot_start_says_why_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import STATE_DIR
    from rollbox.sandbox.namespaces._backend import NamespaceHost
    from rollbox.sandbox.runtime._mounts import RuntimeMounts

    def sandbox_dirs() -> set[Path]:
        return set((STATE_DIR / "sandboxes").glob("*"))

    before = sandbox_dirs()
    # An interpreter prefix that vanished: the launcher cannot bind it into the root.
    monkeypatch.setattr(NamespaceHost.get(), "runtime", RuntimeMounts((("/nonexistent/runtime", "/opt/rollbox/x"),)))

    async def main() -> None:
        async with Sandbox(limits=FAST):
            pass

    with pytest.raises(rollbox.SandboxError, match=r"failed to start: .*/nonexistent/runtime: No such file"):
        asyncio.run(main())
    assert sandbox_dirs() == before


@pytest.mark.parametrize("trees", ["detached", "held"])
def test_the_next_start_reaps_what_a_killed_supervisor_left(tmp_path: Path, trees: str) -> None:
    from conftest import STATE_DIR, rollbox_mounts

    script = textwrap.dedent("""
        import asyncio, sys, rollbox
        async def main():
            async with rollbox.Sandbox(limits=rollbox.Limits(timeout_s=60)) as sb:
                print(sb._impl.id, *sb._impl._cgroup.dirs, flush=True)
                await sb.exec(["sleep", "60"])
        asyncio.run(main())
    """)
    env = {**os.environ, "ROLLBOX_HELD_TREES": "1" if trees == "held" else "0"}
    supervisor = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    assert supervisor.stdout is not None
    sandbox_id, *cgroup_dirs = supervisor.stdout.readline().split()
    supervisor.stdout.close()
    supervisor.send_signal(signal.SIGKILL)  # by pid: the process this test started
    supervisor.wait()
    assert (STATE_DIR / "sandboxes" / sandbox_id).exists(), "the killed supervisor should have left its sandbox"
    assert not rollbox_mounts()  # its tree was never mounted on the host, detached or held

    subprocess.run([sys.executable, "-c", "import asyncio, rollbox; asyncio.run(rollbox.run(['true']))"], check=True)
    assert not (STATE_DIR / "sandboxes" / sandbox_id).exists()
    assert not any(Path(d).exists() for d in cgroup_dirs)


def test_a_tree_held_by_the_spawner_serves_as_a_detached_one_and_leaves_nothing() -> None:
    """Where the kernel cannot clone a detached mount (Linux 6.1, 6.12), the writable tree is held mounted in the
    spawner's own mount namespace, never the host's, and each launcher gets a clone of it."""
    from conftest import rollbox_mounts

    script = textwrap.dedent("""
        import asyncio, os, re, rollbox
        from rollbox.sandbox.agent._spawner import Spawner
        def held():  # trees mounted in the spawner's namespace: /tmp/<sandbox id> there
            with open(f"/proc/{Spawner.running().pid}/mountinfo") as f:
                return sum(bool(re.fullmatch("/tmp/[0-9a-f]{12}", line.split()[4])) for line in f)
        async def main():
            async with rollbox.SandboxPool(size=1) as pool, pool.sandbox() as sb:
                await sb.write_file("a.txt", "hello")
                first = await sb.exec(["sh", "-c", "cat a.txt; echo made > b.txt"])
                print(first.stdout_text, sb._impl._dir.held_as == sb._impl.id, held())
                sb._impl._agent.alive = False  # the next command restarts the agent on the same tree
                print((await sb.exec(["cat", "b.txt"])).stdout_text.strip())
                await sb.reset(fresh=True)  # a new tree, the old one released
                print((await sb.exec(["ls", "-A"])).stdout_text == "", held())
            print(held())
        asyncio.run(main())
    """)
    env = {**os.environ, "ROLLBOX_HELD_TREES": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hello", "True", "1", "made", "True", "1", "0"], done.stdout
    assert not rollbox_mounts()


def test_process_backend_warns_every_time_and_still_limits_time() -> None:
    async def main() -> ExecResult:
        async with Sandbox(limits=FAST, backend="process") as sb:
            await sb.write_file("x.txt", "hello")
            r = await sb.exec(["cat", "x.txt"])
            assert r.stdout == b"hello"
            return await sb.exec(["sleep", "10"], timeout_s=0.3)

    for _ in range(2):
        with pytest.warns(rollbox.InsecureBackendWarning, match="NOT a security boundary"):
            r = asyncio.run(main())
        assert r.status is Status.TIMEOUT


def test_process_backend_ends_a_busy_loop_at_its_cpu_limit() -> None:
    # This backend counts no command's CPU as it runs: each process's own clock (RLIMIT_CPU) is the limit itself,
    # not the backstop a second later that the namespaces backend's watched count leaves it.
    async def main() -> ExecResult:
        async with Sandbox(limits=Limits(cpu_time_s=1, timeout_s=10), backend="process") as sb:
            return await sb.exec(["python3", "-c", "while True: pass"])

    with pytest.warns(rollbox.InsecureBackendWarning):
        r = asyncio.run(main())
    assert r.status is Status.CPU_TIME_LIMIT and r.cpu_s < 1.5, (r.status, r.cpu_s)


def test_json_form_is_the_exec_contract() -> None:
    r = ExecResult(status=Status.OK, exit_code=0, stdout=b"\xff\xfeok")
    data = r.to_json()
    assert list(data) == [
        "status",
        "exit_code",
        "signal",
        "stdout",
        "stderr",
        "stdout_truncated",
        "stderr_truncated",
        "wall_s",
        "cpu_s",
        "peak_memory_bytes",
        "error",
    ]
    assert data["stdout"] == "\ufffd\ufffdok"
    json.dumps(data)


@pytest.mark.slow
def test_a_descendant_spun_to_the_cpu_limit_is_the_commands_cpu_limit_every_time() -> None:
    # A child spins to the CPU limit, and the shell that started it then exits 0. A process's own CPU clock
    # (RLIMIT_CPU) is tick-based and fires a little early: when it killed the child at the limit, the cgroup's count
    # was a hair short of it and the command read `ok` (about one run in twelve). The cgroup's count decides.
    async def runs(sb: Sandbox) -> list[ExecResult]:
        return [await sb.exec(["sh", "-c", "python3 -c 'while True: pass'; exit 0"]) for _ in range(12)]

    async def main() -> list[ExecResult]:
        limits = Limits(cpu_time_s=1, timeout_s=10)
        async with Sandbox(limits=limits) as first, Sandbox(limits=limits) as second:
            both = await asyncio.gather(runs(first), runs(second))
        return [*both[0], *both[1]]

    results = asyncio.run(main())
    assert [r.status for r in results] == [Status.CPU_TIME_LIMIT] * 24, [(r.status.value, r.cpu_s) for r in results]


@pytest.mark.parametrize(
    ("killed_for", "wait_status", "usage", "expected"),
    [
        (None, 0, Usage(0.1, 1), Status.OK),
        (None, 1 << 8, Usage(0.1, 1), Status.NONZERO_EXIT),
        (None, signal.SIGSEGV, Usage(0.1, 1), Status.SIGNALED),
        (Status.TIMEOUT, signal.SIGKILL, Usage(0.1, 1, oom_kills=1), Status.TIMEOUT),
        (None, signal.SIGKILL, Usage(0.1, 1, oom_kills=1, pids_limit_hits=3, memory_limit_hits=1), Status.MEMORY_LIMIT),
        (None, signal.SIGKILL, Usage(0.1, 1, oom_kills=1), Status.INFRA_ERROR),  # no limit of its own was reached
        (None, signal.SIGXCPU, Usage(2.5, 1), Status.CPU_TIME_LIMIT),
        (None, signal.SIGXCPU, Usage(0.5, 1), Status.SIGNALED),
        (None, signal.SIGXFSZ, Usage(0.1, 1), Status.SIGNALED),
        (None, 0, Usage(2.5, 1), Status.CPU_TIME_LIMIT),
        (None, 1 << 8, Usage(0.1, 1, pids_limit_hits=1), Status.PIDS_LIMIT),
        (None, 0, Usage(0.1, 1, memory_over_limit=True), Status.MEMORY_LIMIT),  # v1's sockets, gone by the end
        (None, 1 << 8, Usage(0.1, 1, memory_over_limit=True, pids_limit_hits=1), Status.MEMORY_LIMIT),
        (None, signal.SIGXFSZ, Usage(0.1, 1, disk_full=True), Status.DISK_LIMIT),
        (None, 1 << 8, Usage(0.1, 1, disk_full=True), Status.DISK_LIMIT),
        (None, None, Usage(0.1, 1), Status.SIGNALED),
    ],
)
def test_first_limit_hit_wins(
    killed_for: Status | None, wait_status: int | None, usage: Usage, expected: Status
) -> None:
    status, _exit_code, _signal = classify(killed_for=killed_for, wait_status=wait_status, usage=usage, limits=FAST)
    assert status is expected


def test_parsers_accept_human_units_and_refuse_garbage() -> None:
    from rollbox.sandbox import parse_duration, parse_size

    assert parse_size("256M") == 256 * 2**20
    assert parse_size("1.5G") == int(1.5 * 2**30)
    assert parse_size("4096") == 4096
    assert parse_size("64KiB") == 64 * 1024
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2m") == 120
    with pytest.raises(ValueError, match="invalid size 'lots'"):
        parse_size("lots")
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration("-1")
    assert parse_size(1e9) == 10**9 and type(parse_size(1e9)) is int
    for garbage in (1.5, True, None):
        with pytest.raises(ValueError, match="invalid size"):
            parse_size(garbage)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(True)
    # Digits enough to overflow a float: OverflowError escaped where callers catch ValueError (an importer's row).
    with pytest.raises(ValueError, match="too large"):
        parse_size("9" * 400 + "G")
    with pytest.raises(ValueError, match="too large"):
        parse_duration("9" * 400)


def test_limits_are_plain_numbers_of_their_kind_and_bounded() -> None:
    limits = Limits(memory_bytes=1e9, timeout_s=5)  # type: ignore[arg-type]
    assert (limits.memory_bytes, type(limits.memory_bytes), type(limits.timeout_s)) == (10**9, int, float)
    for bad, message in (
        ({"pids": 2.9}, "Limits.pids must be a whole number, got 2.9"),
        ({"open_files": True}, "Limits.open_files must be a finite number, got True"),
        ({"open_files": 2**63}, "Limits.open_files must be at most 2\\*\\*62"),
        ({"cpu_time_s": float("nan")}, "Limits.cpu_time_s must be a finite number"),
        ({"memory_bytes": "1G"}, "Limits.memory_bytes must be a finite number, got '1G'"),
    ):
        with pytest.raises(ValueError, match=message):
            Limits(**bad)  # type: ignore[arg-type]
    # None leaves only file_size_bytes unset (the disk limit applies); any other limit refuses it at once, not in
    # the middle of a sandbox's start.
    for name in (f.name for f in dataclasses.fields(Limits) if f.name != "file_size_bytes"):
        with pytest.raises(ValueError, match=f"Limits.{name} must be a finite number, got None"):
            Limits(**{name: None})
    assert Limits(file_size_bytes=None).effective_file_size_bytes == Limits().disk_bytes


def test_write_tree_copies_files_and_links_never_following_them(tmp_path: Path) -> None:
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "impl.py").write_text("VALUE = 7\n")
    (tmp_path / "src" / "alias.py").symlink_to("pkg/impl.py")
    (tmp_path / "src" / "escape").symlink_to("/etc/shadow")  # inside the sandbox this is the sandbox's own /etc
    (tmp_path / "src" / "linked_dir").symlink_to("pkg")

    async def main() -> tuple[int, ExecResult]:
        async with Sandbox(limits=FAST) as sb:
            count = await sb.write_tree(tmp_path / "src")
            return count, await sb.exec(
                ["sh", "-c", "python3 -c 'import alias; print(alias.VALUE)'; readlink escape linked_dir"]
            )

    count, result = asyncio.run(main())
    assert count == 4
    assert result.stdout_text == "7\n/etc/shadow\npkg\n", result


def test_read_tree_copies_the_workspace_out_as_written_never_following_a_link(tmp_path: Path) -> None:
    script = (
        "mkdir -p pkg/deep && echo 'VALUE = 7' > pkg/impl.py && echo x > pkg/deep/leaf"
        " && printf '#!/bin/sh\\n' > run.sh && chmod +x run.sh"
        " && ln -s /etc/passwd escape && ln -s pkg linked_dir && mkfifo pipe && echo t > /tmp/t"
    )

    async def main() -> tuple[int, int]:
        async with Sandbox(limits=FAST) as sb:
            assert (await sb.exec(["sh", "-c", script])).status is Status.OK
            return await sb.read_tree(tmp_path / "out"), await sb.read_tree(tmp_path / "pkg", "pkg/deep")

    count, deep = asyncio.run(main())
    out = tmp_path / "out"
    assert count == 7 and deep == 1  # pkg, pkg/impl.py, pkg/deep, pkg/deep/leaf, run.sh, escape, linked_dir
    assert (out / "pkg" / "impl.py").read_text() == "VALUE = 7\n" and (tmp_path / "pkg" / "leaf").read_text() == "x\n"
    assert os.access(out / "run.sh", os.X_OK) and not os.access(out / "pkg" / "impl.py", os.X_OK)
    assert os.readlink(out / "escape") == "/etc/passwd" and os.readlink(out / "linked_dir") == "pkg"
    assert not (out / "pipe").exists() and not (out / "t").exists()


def test_read_tree_stops_at_its_limits_and_refuses_paths_outside_the_sandbox(tmp_path: Path) -> None:
    async def main() -> list[str]:
        errors = []
        async with Sandbox(limits=FAST) as sb:
            # A sparse file costs the program no disk: its size must not be what the copy trusts.
            await sb.exec(["sh", "-c", "truncate -s 10M sparse && touch a b c"])
            with pytest.raises(rollbox.sandbox.TreeTooLarge) as caught:
                await sb.read_tree(tmp_path / "out", max_bytes=2**20)
            errors.append(str(caught.value))
            with pytest.raises(rollbox.sandbox.TreeTooLarge) as caught:
                await sb.read_tree(tmp_path / "out", max_files=2)
            errors.append(str(caught.value))
            for outside in ("../etc", "/etc", "/proc/self"):
                with pytest.raises(ValueError):
                    await sb.read_tree(tmp_path / "out", outside)
            await sb.exec(["sh", "-c", "rm sparse && ln -s /etc dir"])
            with pytest.raises(OSError, match="symbolic link"):
                await sb.read_tree(tmp_path / "out2", "dir")
        return errors

    errors = asyncio.run(main())
    assert "more than 1048576 bytes" in errors[0] and "more than 2 entries" in errors[1]


@pytest.mark.slow
def test_a_command_may_run_longer_than_any_internal_wait() -> None:
    # Regression: the wait for the agent's exit report once had a fixed bound shorter than the command's limit.
    r = asyncio.run(rollbox.run(["sh", "-c", "sleep 4; echo done"], limits=Limits(timeout_s=10, cpu_time_s=5)))
    assert r.status is Status.OK and r.stdout == b"done\n", r


@pytest.mark.native_speed
def test_orphans_are_reaped_at_once_and_never_count_against_the_pids_limit() -> None:
    """The agent is pid 1 inside: every orphan becomes its child, and an unreaped one would still count against
    the command's pids limit. Two hundred orphans, one after another, under a limit of 32."""

    async def main() -> ExecResult:
        async with Sandbox(limits=FAST) as sb:
            return await sb.exec(["sh", "-c", "for i in $(seq 200); do (true &); done; echo done"])

    result = asyncio.run(main())
    assert result.status is Status.OK and result.stdout == b"done\n", result


def test_a_new_state_directory_on_disk_gets_a_tmpfs_and_one_in_use_is_never_mounted_over(tmp_path: Path) -> None:
    from rollbox.sandbox.namespaces._state import StateDir, _on_tmpfs

    if _on_tmpfs(tmp_path):
        pytest.skip(f"{tmp_path} is on a tmpfs already: nothing would be mounted")
    fresh, used = tmp_path / "fresh", tmp_path / "used"
    used.mkdir()
    (used / "left-by-a-dead-owner").write_text("")

    def mounts(path: Path) -> int:
        return sum(line.split()[4] == str(path) for line in Path("/proc/self/mountinfo").read_text().splitlines())

    try:
        for _ in range(2):
            StateDir(fresh).ensure()
            StateDir(used).ensure()
        assert mounts(fresh) == 1 and _on_tmpfs(fresh / "sandboxes")  # once, however often it is ensured
        assert mounts(used) == 0 and (used / "left-by-a-dead-owner").exists()
    finally:
        while os.path.ismount(fresh):
            subprocess.run(["umount", "--lazy", str(fresh)], check=True)


def test_dev_has_the_usual_devices_a_terminal_and_nothing_more_can_be_made() -> None:
    names = ["null", "zero", "full", "random", "urandom", "tty"]
    script = textwrap.dedent("""
        import errno, json, os, pty, sys
        found = {n: os.stat(f"/dev/{n}").st_rdev for n in sys.argv[1:] if os.path.exists(f"/dev/{n}")}
        with open("/dev/null", "w") as f:
            f.write("x")
        zeros = open("/dev/zero", "rb").read(4)
        try:
            with open("/dev/full", "w") as f:
                f.write("x")
            full = "written"
        except OSError as exc:
            full = errno.errorcode[exc.errno]
        made = []
        for where in ("/dev/x", "/workspace/x", "/tmp/x"):
            try:
                os.mknod(where, 0o666 | 0o020000, os.makedev(1, 3))
                made.append(where)
            except OSError:
                pass
        master, slave = pty.openpty()
        print(json.dumps({"found": found, "zeros": zeros.hex(), "full": full, "made": made, "tty": os.ttyname(slave)}))
    """)

    async def main() -> ExecResult:
        async with Sandbox(limits=FAST) as sb:
            return await sb.exec(["python3", "-c", script, *names])

    result = asyncio.run(main())
    assert result.ok, result
    seen = json.loads(result.stdout_text)
    assert seen["found"] == {n: os.stat(f"/dev/{n}").st_rdev for n in names}  # the host's devices, and all of them
    assert seen["zeros"] == "00000000" and seen["full"] == "ENOSPC"
    assert seen["made"] == []  # no device node anywhere: no capability, a read-only /dev, nodev trees
    assert seen["tty"].startswith("/dev/pts/")


def test_an_open_sandbox_holds_at_most_four_host_descriptors() -> None:
    # Any fork of the host process copies them all, and thousands of sandboxes may be open: the control socket, the
    # next command's sync socket, the launcher's status pipe (which also says when the launcher ended: no pidfd) and
    # the sandbox's writable tree; its uid and its directory are held through one descriptor for all sandboxes. The
    # launcher's stderr is closed once it started. On cgroup v2 (Linux 6.12 and later) the command's cgroup, passed
    # on to the next command, also keeps its memory.peak open: one more.
    def descriptors() -> dict[str, str]:
        found = {}
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        return found

    async def main() -> list[str]:
        async with Sandbox(limits=FAST) as sb:  # what rollbox opens once (the spawner, thread pools) is open now
            await sb.exec(["true"])
        before = descriptors()
        sandboxes = [Sandbox(limits=FAST) for _ in range(5)]
        try:
            for sb in sandboxes:
                await sb.__aenter__()
                assert (await sb.exec(["true"])).ok
                await sb._spare  # its next command's process is forked: its descriptors are counted too
            return [target for fd, target in descriptors().items() if fd not in before]
        finally:
            for sb in sandboxes:
                await sb.close()

    new = asyncio.run(main())
    peaks = [target for target in new if target.endswith("/memory.peak")]
    assert len(peaks) <= 5 and len(new) - len(peaks) <= 4 * 5, new


def test_an_oom_kill_from_outside_the_sandbox_is_the_hosts_failure_not_the_programs() -> None:
    """A command killed by an out-of-memory killer while no limit of the sandbox's was reached (the machine, or a
    cgroup above rollbox's, ran out) gets ``infra_error``: it did nothing wrong. Simulated with a parent cgroup
    whose memory limit is below the sandbox's; a command over its own limit there is still ``memory_limit``."""
    from rollbox.sandbox.namespaces._cgroup import CgroupTree

    tree = CgroupTree.detect()
    name = f"rollbox-test-outside-oom-{os.getpid()}"
    parents = [mount / name for mount in tree.mounts.values()]
    script = textwrap.dedent("""
        import asyncio, rollbox
        async def main():
            for limit_mib, mib in ((512, 256), (48, 96)):
                limits = rollbox.Limits(memory_bytes=limit_mib << 20, timeout_s=20, cpu_time_s=10)
                async with rollbox.Sandbox(limits=limits) as sb:
                    result = await sb.exec(["python3", "-c", f"x = bytearray({mib} << 20)"])
                    print(result.status.value, result.error, flush=True)
        asyncio.run(main())
    """)
    try:
        for parent in parents:
            parent.mkdir()
        limit = str(128 << 20)
        if tree.version == 2:
            (tree.mounts[""] / "cgroup.subtree_control").write_text("+memory +pids")  # as rollbox does itself
            (parents[0] / "memory.max").write_text(limit)
            (parents[0] / "pids.max").write_text("64")
        else:
            (tree.mounts["memory"] / name / "memory.limit_in_bytes").write_text(limit)
            (tree.mounts["pids"] / name / "pids.max").write_text("64")
        env = {**os.environ, "ROLLBOX_CGROUP_PARENT": f"/{name}"}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    finally:
        for parent in parents:
            with contextlib.suppress(FileNotFoundError):
                parent.rmdir()
    outside, own = done.stdout.splitlines()
    assert outside.startswith("infra_error an out-of-memory killer outside the sandbox"), done
    assert own.startswith("memory_limit"), done


def test_a_supervisor_killed_for_the_machines_memory_is_an_infra_error() -> None:
    """The agent runs in rollbox's own cgroup, outside every sandbox's. When an out-of-memory killer there kills it
    during a command, the command's end is the host's failure, ``infra_error``; an agent that died any other way
    during a command stays the program's (test_attacks). Here rollbox starts in a cgroup with 200 MiB (its
    spawner, launchers and agents stay there), then leaves it, so that it is never the OOM killer's choice (killed,
    it could not report, and would leave its sandbox's directory behind); a process started there takes 300, and
    the agent is the OOM killer's first choice."""
    from rollbox.sandbox.agent._build import agent_binary
    from rollbox.sandbox.namespaces._cgroup import CgroupTree

    tree = CgroupTree.detect()
    name = f"rollbox-test-helpers-oom-{os.getpid()}"
    mount = tree.mounts["memory" if tree.version == 1 else ""]
    outer = mount / name
    home = outer / "host" if tree.version == 2 else outer  # v2: processes only in leaves
    script = textwrap.dedent("""
        import asyncio, os, sys, rollbox
        from pathlib import Path
        home, back = sys.argv[1:]
        def cmdline(pid):
            try:
                return Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                return b""
        async def main():
            async with rollbox.Sandbox(limits=rollbox.Limits(timeout_s=20)) as sb:
                await sb._spare  # the command's process is forked (its score stays 0); then the agent's goes up
                agent = sb._impl.agent.pid
                with open(f"/proc/{agent}/oom_score_adj", "w") as f:
                    f.write("1000")
                with open(back, "w") as f:
                    f.write(str(os.getpid()))
                command = asyncio.ensure_future(sb.exec(["sleep", "10"]))
                children = Path(f"/proc/{agent}/task/{agent}/children")
                running = b"sleep\\x0010\\x00"  # the agent's child, once it runs the command
                while not command.done() and all(cmdline(pid) != running for pid in children.read_text().split()):
                    await asyncio.sleep(0.02)
                fill = f'echo $$ > {home}/cgroup.procs && exec "$0" -c "x = bytearray(300 << 20)"'
                balloon = await asyncio.create_subprocess_exec("sh", "-c", fill, sys.executable)
                await balloon.wait()  # killed in turn, once the agent is gone and memory is still short
                result = await command
                print(result.status.value, result.error, flush=True)
        asyncio.run(main())
    """)
    env = dict(os.environ)
    try:
        outer.mkdir()
        if tree.version == 2:
            (mount / "cgroup.subtree_control").write_text("+memory +pids")  # as rollbox does itself
            (outer / "cgroup.subtree_control").write_text("+memory +pids")
            home.mkdir()
            (outer / "sandboxes").mkdir()
            (outer / "memory.max").write_text(str(200 << 20))
            env["ROLLBOX_CGROUP_PARENT"] = f"/{name}/sandboxes"
        else:
            (outer / "memory.limit_in_bytes").write_text(str(200 << 20))
        agent_binary()  # built here, not by a compiler inside the small cgroup
        # Into that cgroup first, then rollbox: its spawner, agents and sandboxes all start inside it.
        controller = "memory" if tree.version == 1 else ""
        lines = (line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines())
        own = next(path for _id, controllers, path in lines if controller in controllers.split(","))
        back = mount / own.lstrip("/") / "cgroup.procs"  # where this test runs, to which rollbox then moves
        launch = f'echo $$ > {home}/cgroup.procs && exec "$0" -c "$1" {home} {back}'
        argv = ["sh", "-c", launch, sys.executable, script]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    finally:
        for directory in sorted(outer.rglob("*/"), key=lambda p: -len(p.parts)) if outer.exists() else []:
            with contextlib.suppress(OSError):
                directory.rmdir()  # what rollbox could not remove, had it been killed
        with contextlib.suppress(OSError):
            outer.rmdir()
    assert done.stdout.startswith("infra_error an out-of-memory killer outside the sandbox killed the sandbox's"), done


def test_sandbox_paths_are_split_into_a_writable_root_and_a_clean_relative_path() -> None:
    from rollbox.sandbox._files import resolve_sandbox_path

    assert resolve_sandbox_path("a/./b//c") == ("workspace", "a/b/c")
    assert resolve_sandbox_path("/tmp/x/") == ("tmp", "x")
    assert resolve_sandbox_path("/workspace/.hidden") == ("workspace", ".hidden")
    for path, message in [
        ("/workspace", "is a directory"),
        ("", "is a directory"),
        ("/", "outside the writable directories"),
        ("/tmpfoo/x", "outside the writable directories"),
        ("/etc/passwd", "outside the writable directories"),
        ("a/../../etc", "must not contain '..'"),
        ("a\0b", "NUL"),
    ]:
        with pytest.raises(ValueError, match=message):
            resolve_sandbox_path(path)


def test_a_cancelled_exec_leaves_no_task_behind_and_the_sandbox_serves_on() -> None:
    async def main() -> tuple[list[asyncio.Task[object]], ExecResult]:
        async with Sandbox(limits=FAST) as sb:
            command = asyncio.create_task(sb.exec(["sleep", "5"]))
            await asyncio.sleep(0.3)
            command.cancel()
            with pytest.raises(asyncio.CancelledError):
                await command
            await asyncio.sleep(0)  # what the cancellation cancelled finishes on the next turn of the loop
            # Nothing but the sandbox's own preparation of its next command (which also removes the cancelled
            # command's cgroup, as after every command), which it awaits or cancels itself.
            left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and t is not sb._spare]
            return left, await sb.exec(["echo", "next"])

    left, after = asyncio.run(main())
    assert left == [] and after.stdout == b"next\n", (left, after)


def test_a_start_cancelled_at_any_moment_leaves_no_process() -> None:
    # Cancelled while the spawner starts the launcher, the launcher must end with its agent before the cancellation
    # is through: a launcher killed then would leave its agent to die in its own time, after the sandbox closed.
    # Cancelled twice, as a timeout inside a cancelled task is: the second must not cut the first's cleanup short.
    from conftest import cancel_while_opening, own_sandbox_processes

    async def main() -> dict[float, set[int]]:
        left = {}
        for step in range(40):
            await cancel_while_opening(Sandbox(limits=FAST).__aenter__(), step * 0.0005, times=2)
            if survivors := own_sandbox_processes():
                left[step * 0.0005] = survivors
        return left

    assert asyncio.run(main()) == {}


def test_a_cancelled_start_of_the_process_backend_leaves_nothing() -> None:
    from conftest import cancel_while_opening, living_children
    from rollbox.sandbox.agent._spawner import Spawner

    def leftovers() -> set[str]:
        return {p.name for p in Path(tempfile.gettempdir()).glob("rollbox-process-*")}

    async def cancelled_after(delay_s: float) -> list[int]:
        await cancel_while_opening(Sandbox(limits=FAST, backend="process").__aenter__(), delay_s)
        return living_children(Spawner.get().pid)

    async def main() -> list[list[int]]:
        return [await cancelled_after(step * 0.0005) for step in range(30)]

    before = leftovers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rollbox.InsecureBackendWarning)
        running = asyncio.run(main())
    assert running == [[]] * 30 and leftovers() == before, (running, leftovers() - before)


def test_a_closed_process_sandbox_leaves_no_spare_behind() -> None:
    # The process backend's agent is no sandbox's pid 1: a spare it forked outlived it, orphaned, and ended in its
    # own time after the close had returned (at once when it saw its sync socket close; never, stopped, as here).
    from rollbox.sandbox.agent._protocol import Spare, pidfd_ended

    async def main() -> bool:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", rollbox.InsecureBackendWarning)
            sb = await Sandbox(limits=FAST, backend="process").__aenter__()
        assert sb._spare is not None
        spare = await sb._spare
        assert isinstance(spare, Spare)
        pidfd = os.pidfd_open(spare.pid)
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
            await sb.close()
            ended = pidfd_ended(pidfd)
            if not ended:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            return ended
        finally:
            os.close(pidfd)

    assert asyncio.run(main())


def test_work_that_must_end_is_waited_for_through_repeated_cancellations() -> None:
    from rollbox.sandbox._settle import settled

    async def main() -> tuple[bool, bool, bool]:
        work = asyncio.ensure_future(asyncio.sleep(0.2, result="done"))

        async def waiter() -> None:
            if await settled(work):
                raise asyncio.CancelledError

        waiting = asyncio.ensure_future(waiter())
        for _ in range(3):  # as a timeout inside a cancelled task, and a close on top
            await asyncio.sleep(0.02)
            waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return work.done(), work.cancelled(), waiting.cancelled()

    assert asyncio.run(main()) == (True, False, True)  # the work ended on its own, then the waiter was cancelled


def test_an_agent_that_outlasts_its_launcher_is_waited_for() -> None:
    # An agent that does not end when its sandbox closes (stopped here, by this test, through its pid; in life,
    # slow to tear down on a busy machine) gets its launcher killed after two seconds. The launcher then never
    # reaps it: it dies of its parent-death signal, in its own time, freeing a 250 MB tree on the way, and close
    # must not return before it has.
    limits = Limits(timeout_s=20, cpu_time_s=10, memory_bytes=512 * 2**20, disk_bytes=300 * 2**20)

    async def main() -> bool:
        async with Sandbox(limits=limits) as sb:
            fill = await sb.exec(["sh", "-c", "head -c 250M /dev/zero > /tmp/big && touch $(seq 2000)"])
            assert fill.ok, fill
            agent = os.pidfd_open(sb._impl.agent.pid)  # type: ignore[union-attr]
            signal.pidfd_send_signal(agent, signal.SIGSTOP)
        try:
            return bool(select.select([agent], [], [], 0)[0])  # readable: it has ended
        finally:
            os.close(agent)

    assert asyncio.run(main())


_FREEZER = Path("/sys/fs/cgroup/freezer")
needs_freezer = pytest.mark.skipif(not (_FREEZER / "cgroup.procs").exists(), reason="needs cgroup v1's freezer")


@contextlib.asynccontextmanager
async def _frozen(argv: list[str]) -> AsyncIterator[None]:
    """Freeze the process running ``argv`` (one this test's sandbox started) with v1's freezer, where SIGKILL waits
    until it is thawed: it stands for one the host cannot end (stuck in the kernel, say). Thawed on the way out."""
    from conftest import own_sandbox_processes

    marker = b"".join(arg.encode() + b"\0" for arg in argv)
    while not (running := [p for p in own_sandbox_processes() if _cmdline(p) == marker]):
        await asyncio.sleep(0.02)
    frozen = _FREEZER / f"rollbox-test-unkillable-{os.getpid()}"
    frozen.mkdir()
    try:
        (frozen / "cgroup.procs").write_text(str(running[0]))
        (frozen / "freezer.state").write_text("FROZEN")
        try:
            yield
        finally:
            (frozen / "freezer.state").write_text("THAWED")  # it dies now, before the sandbox closes
    finally:
        while frozen.exists():
            with contextlib.suppress(OSError):
                frozen.rmdir()


@pytest.mark.slow
@needs_freezer
def test_a_command_the_host_cannot_kill_is_an_infra_error_never_a_hang() -> None:
    # Its command times out, the kill fails after its five seconds, and exec reports it.
    async def main() -> tuple[ExecResult, list[ExecResult], bool]:
        async with Sandbox(limits=Limits(timeout_s=1, cpu_time_s=5)) as sb, Sandbox(limits=FAST) as other:
            command = asyncio.ensure_future(sb.exec(["sleep", "31.5"]))
            async with _frozen(["sleep", "31.5"]):
                # While the kill waits (after the 1 s timeout), another sandbox's commands go on: it waits in the
                # event loop, not holding it up.
                await asyncio.sleep(1.5)
                beside = [await other.exec(["true"]) for _ in range(5)]
                waiting = not command.done()
                return await asyncio.wait_for(command, 30), beside, waiting

    result, beside, waiting = asyncio.run(main())
    assert result.status is Status.INFRA_ERROR and "survived SIGKILL" in (result.error or ""), result
    assert waiting and all(r.ok for r in beside), beside


@pytest.mark.slow
@needs_freezer
def test_a_cancelled_command_is_removed_in_the_background_and_holds_up_no_other_sandbox() -> None:
    # Cancelled, the command's processes are killed and its cgroup removed in a worker thread (as after any
    # command): one slow to die (here, one that cannot) keeps neither the cancellation nor other sandboxes waiting.
    async def main() -> tuple[bool, list[ExecResult], bool, ExecResult]:
        async with Sandbox(limits=FAST) as sb, Sandbox(limits=FAST) as other:
            command = asyncio.ensure_future(sb.exec(["sleep", "32.5"]))
            async with _frozen(["sleep", "32.5"]):
                command.cancel()
                await asyncio.wait([command])
                cancelled = command.cancelled()
                beside = [await other.exec(["true"]) for _ in range(5)]
                removing = sb._spare is not None and not sb._spare.done()  # still waiting for the frozen process
            return cancelled, beside, removing, await sb.exec(["echo", "next"])

    cancelled, beside, removing, after = asyncio.run(main())
    assert cancelled and removing and all(r.ok for r in beside), beside
    assert after.ok and after.stdout == b"next\n", after


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_read_file_can_refuse_a_file_larger_than_the_caller_wants() -> None:
    # A sparse file costs the program no disk, and its whole size in the host's memory when read.
    async def main() -> tuple[bytes, int]:
        async with Sandbox(limits=FAST) as sb:
            await sb.exec(["sh", "-c", "echo small > small.txt; truncate -s 12M huge.txt"])
            small = await sb.read_file("small.txt", max_bytes=6)
            with pytest.raises(OSError) as refused:
                await sb.read_file("huge.txt", max_bytes=1 << 20)
            return small, refused.value.errno

    assert asyncio.run(main()) == (b"small\n", errno.EFBIG)


def test_a_start_short_of_descriptors_says_so_and_what_it_made_is_removed_at_the_next_start() -> None:
    # Out of file descriptors at each step of a start in turn (this process's limit lowered meanwhile): each start
    # fails with a SandboxError naming the cause; what it made, where removing it failed too, goes at the next start.
    import resource

    from rollbox.sandbox import SandboxError
    from rollbox.sandbox.namespaces._backend import NamespaceHost

    def open_fds() -> set[str]:
        return set(os.listdir("/proc/self/fd"))

    async def main() -> tuple[list[str], set[str], set[Path], bool]:
        async with Sandbox(limits=FAST) as sb:  # the host, the spawner and the agent binary are set up once
            await sb.exec(["true"])
        host = NamespaceHost.get()
        fds, dirs = open_fds(), set(host.state.sandboxes.iterdir())
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        # The holes below the highest descriptor filled, a limit of top + n leaves exactly n to be had.
        top, fillers = max(int(fd) for fd in fds), []
        while (filler := os.open("/dev/null", os.O_RDONLY)) < top:
            fillers.append(filler)
        os.close(filler)
        errors, left_behind = [], False
        try:
            for spare_fds in range(16):
                resource.setrlimit(resource.RLIMIT_NOFILE, (top + 1 + spare_fds, hard))
                try:
                    async with Sandbox(limits=FAST) as sb:
                        break  # enough descriptors now (what failed before holds some, until a start can close it)
                except SandboxError as exc:
                    errors.append(str(exc))
                    left_behind = left_behind or bool(host.unclosed)
                finally:
                    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        finally:
            for filler in fillers:
                os.close(filler)
        async with Sandbox(limits=FAST) as sb:
            assert (await sb.exec(["true"])).ok
        return errors, open_fds() - fds, set(host.state.sandboxes.iterdir()) - dirs, left_behind

    errors, fds, dirs, left_behind = asyncio.run(main())
    assert len(errors) >= 3 and all("Too many open files" in e for e in errors), errors
    assert left_behind  # some attempt could not remove what it made at the time (else this test proves little)
    assert (fds, dirs) == (set(), set())


def test_a_limit_that_fires_while_the_host_is_out_of_descriptors_still_ends_the_command() -> None:
    # The kill at the timeout cannot even list the command's processes: exec still returns (it used to wait forever:
    # the timer's callback raised before it could wake the command's supervisor).
    import resource

    async def main() -> ExecResult:
        async with Sandbox(limits=FAST) as sb:
            await sb.exec(["true"])
            command = asyncio.ensure_future(sb.exec(["sleep", "1000"], timeout_s=0.3))
            await asyncio.sleep(0.1)
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            top, fillers = max(int(fd) for fd in os.listdir("/proc/self/fd")), []
            while (filler := os.open("/dev/null", os.O_RDONLY)) < top:
                fillers.append(filler)
            os.close(filler)
            resource.setrlimit(resource.RLIMIT_NOFILE, (top + 1, hard))  # not one descriptor to be had
            try:
                await asyncio.sleep(0.5)  # the timeout fires meanwhile
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
                for filler in fillers:
                    os.close(filler)
            return await asyncio.wait_for(command, 10)

    result = asyncio.run(main())
    assert result.status in (Status.TIMEOUT, Status.INFRA_ERROR), result
