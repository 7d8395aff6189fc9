"""The ``rollbox`` command line, run as a real process: the ``exec --json`` contract, ``doctor``, ``--help``,
``grade``, and what ``eval humaneval`` does when its output cannot be written or it is interrupted."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollbox.tasks import humaneval_tasks

ROLLBOX = [sys.executable, "-m", "rollbox"]
CONTRACT_KEYS = [
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


def rollbox(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ROLLBOX, *args], capture_output=True, text=True, input=stdin, timeout=60, check=False)


@contextlib.contextmanager
def started(*args: str) -> Iterator[subprocess.Popen[str]]:
    """``rollbox ARGS`` running in the background; killed (by its pid) if the test leaves it running."""
    with subprocess.Popen([*ROLLBOX, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()


def interrupt_when_running(process: subprocess.Popen[str], comm: str) -> str:
    """Send SIGINT to ``process`` once a process named ``comm`` runs (a sandboxed program renames itself so that
    the test sees it start); returns its stderr."""
    deadline = time.monotonic() + 60
    while not any(_comm(entry) == comm for entry in Path("/proc").iterdir()):
        assert time.monotonic() < deadline and process.poll() is None, f"no process named {comm!r} started"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    return stderr


def _comm(proc_entry: Path) -> str | None:
    with contextlib.suppress(OSError):
        return (proc_entry / "comm").read_text().strip()
    return None


def exec_json(*args: str) -> dict[str, Any]:
    done = rollbox("exec", "--json", *args)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_exec_json_prints_exactly_the_contract() -> None:
    data = exec_json("--", "sh", "-c", "echo hi; echo oops >&2; exit 4")
    assert list(data) == CONTRACT_KEYS
    assert (data["status"], data["exit_code"], data["stdout"], data["stderr"]) == (
        "nonzero_exit",
        4,
        "hi\n",
        "oops\n",
    )


def test_exec_files_stdin_and_limits(tmp_path: Path) -> None:
    (tmp_path / "solve.py").write_text("import sys; print(sys.stdin.read().upper(), end='')")
    (tmp_path / "input.txt").write_text("abc")
    data = exec_json(
        "--file",
        f"{tmp_path}/solve.py:solve.py",
        "--file",
        f"{tmp_path}/input.txt:/tmp/in.txt",
        "--stdin",
        str(tmp_path / "input.txt"),
        "--memory",
        "64M",
        "--timeout",
        "5",
        "--",
        "sh",
        "-c",
        "python3 /workspace/solve.py && cat /tmp/in.txt",
    )
    assert (data["status"], data["stdout"]) == ("ok", "ABCabc")


def test_exec_binary_output_stays_valid_json() -> None:
    data = exec_json(
        "--output-limit",
        "16",
        "--",
        "python3",
        "-c",
        "import sys; sys.stdout.buffer.write(b'\\xff\\xfe' * 100)",
    )
    assert data["status"] == "output_limit" and data["stdout_truncated"] is True
    assert data["stdout"] == "\ufffd" * 16


def test_exec_limits_map_to_statuses() -> None:
    assert exec_json("--timeout", "0.5", "--", "sleep", "5")["status"] == "timeout"
    assert exec_json("--cpu-time", "0.5", "--", "python3", "-c", "while True: pass")["status"] == "cpu_time_limit"
    assert exec_json("--network", "loopback", "--", "true")["status"] == "ok"


def test_exec_usage_errors_say_what_to_do(tmp_path: Path) -> None:
    cases = [
        (["exec", "--json"], "no command given"),
        (["exec", "--memory", "lots", "--", "true"], "invalid size 'lots'"),
        (["exec", "--file", "nocolon", "--", "true"], "HOST:SANDBOX"),
        (["exec", "--file", f"{tmp_path}/missing:x", "--", "true"], "cannot read"),
        (["exec", "--pids", "1", "--", "true"], "at least 2"),
    ]
    for args, message in cases:
        done = rollbox(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)


def test_exec_human_summary_and_program_output() -> None:
    done = rollbox("exec", "--", "sh", "-c", "echo visible")
    assert done.returncode == 0
    assert done.stdout == "visible\n"
    assert "rollbox: ok (exit 0)" in done.stderr


def test_exec_process_backend_warns() -> None:
    done = rollbox("exec", "--backend", "process", "--json", "--", "true")
    assert done.returncode == 0
    assert json.loads(done.stdout)["status"] == "ok"
    assert "NOT a security boundary" in done.stderr


def test_exec_reports_infra_error_when_isolation_is_unavailable(tmp_path: Path) -> None:
    # No agent built yet, and no C compiler to build it with.
    env = {**os.environ, "PATH": "/nonexistent", "ROLLBOX_CACHE_DIR": str(tmp_path)}
    env.pop("CC", None)
    done = subprocess.run(
        [*ROLLBOX, "exec", "--json", "--", "true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    data = json.loads(done.stdout)
    assert done.returncode == 1
    assert data["status"] == "infra_error" and "C compiler" in data["error"]


def test_exec_interrupted_exits_130_without_a_traceback() -> None:
    comm = f"rbx-{os.getpid()}"
    with started("exec", "--", "sh", "-c", f"printf {comm} > /proc/$$/comm; sleep 30") as process:
        stderr = interrupt_when_running(process, comm)
    assert process.returncode == 130 and "rollbox: interrupted" in stderr and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("mode", [["--json"], []])
def test_exec_into_a_closed_pipe_exits_141_without_a_traceback(mode: list[str]) -> None:
    with started("exec", *mode, "--output-limit", "20M", "--", "seq", "2000000") as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.read(20)
        process.stdout.close()  # as `| head -c 20` does; the output (14 MB) is far larger than a pipe holds
        stderr = process.stderr.read()
    assert process.returncode == 141 and "Traceback" not in stderr, stderr


def test_doctor_json_says_everything_works_here() -> None:
    done = rollbox("doctor", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["ok"] is True, done.stdout
    names = {c["name"] for c in report["checks"]}
    assert {"native agent", "cgroups", "seccomp", "pid namespace", "network none", "host files hidden"} <= names


def test_help_teaches() -> None:
    top = rollbox("--help").stdout
    for command in ("train", "exec", "grade", "eval humaneval", "doctor", "tour"):
        assert f"rollbox {command}" in top
    exec_help = rollbox("exec", "--help").stdout
    for flag in (
        "--memory",
        "--timeout",
        "--cpu-time",
        "--pids",
        "--output-limit",
        "--disk",
        "--network",
        "--file",
        "--stdin",
        "statuses:",
    ):
        assert flag in exec_help


def make_function_task(root: Path) -> Path:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "sol.py").write_text("def double(x):\n    raise NotImplementedError\n")
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text('{"args": [2], "kwargs": {}, "expected": 4}\n')
    (root / "task.toml").write_text('[grading]\nrunner = "function"\nmodule = "sol.py"\nentry_point = "double"\n')
    return root


def test_grade_json_prints_the_verdict_contract(tmp_path: Path) -> None:
    task = make_function_task(tmp_path / "double")
    solution = tmp_path / "solution"
    solution.mkdir()
    (solution / "sol.py").write_text("def double(x):\n    return 2 * x\n")
    done = rollbox("grade", str(task), "--solution", str(solution), "--json", "--repeat", "2")
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert list(verdict)[:8] == ["task_id", "status", "reward", "tests", "passed", "total", "flags", "duration_s"]
    assert (verdict["status"], verdict["reward"], verdict["passed"], verdict["total"]) == ("passed", 1.0, 1, 1)
    assert verdict["tests"] == [{"id": "double[0]", "outcome": "passed"}]
    assert verdict["repeat"]["flaky"] is False and verdict["repeat"]["runs"] == 2


def test_grade_refuses_a_malformed_task_clearly(tmp_path: Path) -> None:
    task = make_function_task(tmp_path / "t")
    (task / "task.toml").write_text('[grading]\nrunner = "function"\nmodule = "sol.py"\nentrypoint = "double"\n')
    done = rollbox("grade", str(task), "--solution", str(task / "workspace"), "--json")
    assert done.returncode == 2
    assert "did you mean 'entry_point'?" in done.stderr


# -- eval humaneval --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("humaneval") / "tasks"
    humaneval_tasks(dest)
    return dest


def write_samples(path: Path, *completions: tuple[str, str]) -> Path:
    path.write_text("".join(json.dumps({"task_id": t, "completion": c}) + "\n" for t, c in completions))
    return path


WRONG = ("HumanEval/0", "    return False\n")


def test_eval_refuses_an_output_it_cannot_write_before_grading(tmp_path: Path, tasks_dir: Path) -> None:
    samples = write_samples(tmp_path / "samples.jsonl", WRONG)
    subprocess.run(["chattr", "+i", str(tmp_path)], check=True)  # read-only even to root
    try:
        done = rollbox("eval", "humaneval", str(samples), "--tasks-dir", str(tasks_dir))
    finally:
        subprocess.run(["chattr", "-i", str(tmp_path)], check=True)
    assert done.returncode == 2 and "--output PATH" in done.stderr and "grading" not in done.stderr, done.stderr
    assert os.listdir(tmp_path) == ["samples.jsonl"]


def test_eval_usage_errors_exit_2(tmp_path: Path, tasks_dir: Path) -> None:
    samples = write_samples(tmp_path / "samples.jsonl", WRONG)
    cases = [
        ([str(write_samples(tmp_path / "empty.jsonl")), "--tasks-dir", str(tasks_dir)], "no samples in"),
        (["/dev/stdin", "--tasks-dir", str(tasks_dir)], "use --output PATH"),
        ([str(samples), "--tasks-dir", str(samples)], "not a HumanEval import"),
    ]
    for args, message in cases:
        done = rollbox("eval", "humaneval", *args, stdin=samples.read_text())
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)


def test_eval_progress_has_no_redraws_outside_a_terminal(tmp_path: Path, tasks_dir: Path) -> None:
    samples = write_samples(tmp_path / "samples.jsonl", WRONG)
    command = [*ROLLBOX, "eval", "humaneval", str(samples), "--tasks-dir", str(tasks_dir)]
    done = subprocess.run(command, capture_output=True, timeout=60, check=False)  # bytes: text mode hides \r
    assert done.returncode == 0, done.stderr
    assert b"\r" not in done.stderr and done.stderr.count(b"grading [") == 1, done.stderr


def test_eval_interrupted_keeps_what_was_graded(tmp_path: Path, tasks_dir: Path) -> None:
    comm = f"rbx-{os.getpid()}"
    # It names itself (prctl PR_SET_NAME) so that the test sees it start, then sleeps.
    slow = f"    import ctypes, time\n    ctypes.CDLL(None).prctl(15, {comm.encode()!r})\n    time.sleep(30)\n"
    samples = write_samples(tmp_path / "samples.jsonl", WRONG, ("HumanEval/2", slow))
    out = tmp_path / "out.jsonl"
    args = ["eval", "humaneval", str(samples), "--output", str(out), "--workers", "1", "--tasks-dir", str(tasks_dir)]
    with started(*args) as process:  # one worker: the wrong completion is graded before the slow one starts
        stderr = interrupt_when_running(process, comm)
    assert process.returncode == 130 and "Traceback" not in stderr, stderr
    assert "PARTIAL: it holds the 1 of 2 samples" in stderr
    assert [json.loads(line)["task_id"] for line in out.read_text().splitlines()] == ["HumanEval/0"]
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl", "samples.jsonl"]


# -- bad input to every subcommand ----------------------------------------------------------------------------

#: Each subcommand's options with values that are wrong (negative, zero, huge, not a number, NaN, a missing file, a
#: directory for a file, a file for a directory, a file that is not what it should be): each is one line that names
#: what is wrong and what to do, and exits 1 or 2. {PLACES} are filled by the fixture.
BAD_INPUT = [
    (["serve", "--port", "99999"], "--port: must be a whole number from 0 to 65,535"),
    (["serve", "--port", "-1"], "--port"),
    (["serve", "--port", "http"], "--port"),
    (["serve", "--port", "{BUSY}"], "cannot listen on 127.0.0.1:{BUSY} (Address already in use)"),
    (["serve", "--host", "nowhere.invalid"], "cannot listen on 'nowhere.invalid'"),
    (["serve", "--workers", "0"], "--workers"),
    (["serve", "--pool-size", "-2"], "--pool-size"),
    (["serve", "--idle-timeout", "nan"], "--idle-timeout: must be a number of seconds above 0"),
    (["serve", "--body-timeout", "-5"], "--body-timeout"),
    (["serve", "--stream-keepalive", "0"], "--stream-keepalive: must be a number of seconds above 0"),
    (["serve", "--home", "{FILE}"], "--home {FILE} is not a directory"),
    (["serve", "--tasks-dir", "{MISSING}"], "--tasks-dir {MISSING} is not a directory"),
    (["serve", "--alert-rules", "{DIR}"], "cannot write --alert-rules {DIR} (Is a directory)"),
    (["serve", "--add-key", "no such name"], "invalid tenant name"),
    (["serve", "--add-key", ""], "invalid tenant name"),
    (["serve", "--run", "../escaped"], "--run: must be a plain name"),
    (["serve", "--run", ""], "--run: must be a plain name"),
    (["serve", "--add-key", "team", "--home", "{BAD_TENANTS}"], "is not a rollbox tenants file"),
    (["jobs"], "no job store at"),
    (["jobs", "--limit", "0"], "--limit: must be a whole number from 1"),
    (["jobs", "--limit", "-5"], "--limit"),
    (["jobs", "--limit", "99999999999999999999999"], "--limit"),
    (["jobs", "show", "99999999999999999999999"], "JOB: must be a whole number"),
    (["jobs", "show", "one"], "JOB"),
    (["runs", "--bogus"], "unrecognized arguments: --bogus"),
    (["top", "--interval", "-1", "--once"], "--interval: must be a number of seconds above 0"),
    (["top", "--interval", "inf"], "--interval"),
    (["top", "--url", "http://127.0.0.1:{CLOSED}", "--once"], "cannot reach"),
    (["report", "r1", "--events", "{MISSING}"], "cannot read the events at {MISSING} (No such file or directory)"),
    (["report", "r1", "--events", "{FILE}"], "{FILE}:1: not an event"),
    (["report", "r1", "--events", "{EVENTS}", "-o", "{DIR}"], "cannot write {DIR} (Is a directory)"),
    (["grade", "{MISSING}", "--solution", "{DIR}"], "invalid task"),
    (["grade", "{TASK}", "--solution", "{FILE}"], "--solution {FILE}: not a directory"),
    (["grade", "{TASK}", "--solution", "{DIR}", "--repeat", "0"], "--repeat"),
    (["grade", "{TASK}", "--solution", "{DIR}", "--repeat", "99999999999999999999"], "--repeat"),
    (["exec", "--pids", "-1", "--", "true"], "pids must be positive"),
    (["exec", "--timeout", "nan", "--", "true"], "--timeout"),
    (["exec", "--memory", "99999999T", "--", "true"], "memory_bytes must be at most"),
    (["exec", "--stdin", "{DIR}", "--", "true"], "--stdin {DIR}: Is a directory"),
    (["eval", "humaneval", "{MISSING}"], "invalid samples"),
    (["eval", "humaneval", "{FILE}", "--workers", "0"], "--workers"),
    (["eval", "humaneval", "{FILE}", "--workers", "99999999999999999999"], "--workers"),
    (["eval", "humaneval", "{FILE}", "-k", "0"], "every k must be at least 1"),
    (["tasks", "list", "{MISSING}"], "not a directory"),
    (["tasks", "show", "{FILE}"], "invalid task"),
    (["tasks", "rehash", "{MISSING}"], "not a directory"),
    (["tasks", "audit", "{MISSING}"], "invalid task"),
    (["tasks", "import", "stdio", "{MISSING}", "{OUT}"], "cannot read"),
    (["tasks", "import", "nope", "{FILE}", "{OUT}"], "invalid choice: 'nope'"),
    (["tasks", "synth", "pkg", "{OUT}", "--max-mutants", "0"], "--max-mutants"),
    (["tasks", "synth", "pkg", "{OUT}", "--workers", "-1"], "--workers"),
    (["tasks", "synth", "pkg", "{OUT}", "--min-evidence", "0"], "--min-evidence: must be a whole number"),
    (["env", "gc", "--keep-days", "-1"], "--keep-days: must be a number of days, 0 or more"),
    (["env", "gc", "--keep-days", "nan"], "--keep-days"),
    (["env", "build", "{MISSING}"], "invalid task"),
    (["episode", "{TASK}", "--policy", "noop", "--max-turns", "0"], "--max-turns"),
    (["episode", "{TASK}", "--policy", "noop", "--wall-time", "nan"], "--wall-time"),
    (["episode", "{TASK}", "--policy", "telepathy"], "unknown policy 'telepathy'"),
    (["episode", "{TASK}", "--policy", "noop", "--trajectories", "{DIR}"], "cannot write the trajectory to {DIR}"),
    (["run", "{MISSING}"], "does not exist"),
    (["run", "{TASK}", "--samples", "0"], "--samples"),
    (["run", "{TASK}", "--samples", "99999999999999999999"], "--samples"),
    (["run", "{TASK}", "--max-attempts", "99999999999999999999"], "--max-attempts"),
    (["run", "{TASK}", "--wall-time", "nan"], "--wall-time"),
    (["run", "{TASK}", "--run-id", "../../etc"], "--run-id: must be a plain name"),
    (["run", "{TASK}", "--run-id", ".hidden"], "--run-id: must be a plain name"),
    (["run", "{TASK}", "--run-id", "a/b"], "--run-id: must be a plain name"),
    (["run", "{TASK}", "--run-id", "x" * 5000], "--run-id: must be a plain name of at most 128 characters"),
    (["run", "{TASK}", "--run-id", ""], "--run-id: must be a plain name"),
    (["train", "--run-id", "../r"], "--run-id: must be a plain name"),
    (["report", "", "--events", "{EVENTS}"], "RUN_ID: must be a plain name"),
    (["validate", "{MISSING}"], "invalid task"),
    (["validate", "{TASK}", "--runs", "0"], "--runs: must be a whole number from 1"),
    (["validate", "{TASK}", "--workers", "99999999999999999999"], "--workers: must be a whole number"),
    (["validate", "{TASK}", "--min-kill-ratio", "nan"], "--min-kill-ratio: must be a number from 0 to 1"),
    (["validate", "{TASK}", "--max-mutants", "-1"], "--max-mutants: must be a whole number"),
    (["doctor", "--bogus"], "unrecognized arguments"),
    (["tour", "--bogus"], "unrecognized arguments"),
]


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("bad-input")
    (root / "file").write_text("not what any command reads\n")
    (root / "dir").mkdir()
    (root / "events.jsonl").write_text(json.dumps({"kind": "x", "at": 1.0, "run": "r1"}) + "\n")
    (root / "bad-home").mkdir()
    (root / "bad-home" / "tenants.json").write_text("{not json")
    task = make_function_task(root / "task")
    with socket.socket() as busy, socket.socket() as closed:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: nothing answers there
        yield {
            "FILE": str(root / "file"),
            "DIR": str(root / "dir"),
            "MISSING": str(root / "missing"),
            "OUT": str(root / "out"),
            "EVENTS": str(root / "events.jsonl"),
            "TASK": str(task),
            "BAD_TENANTS": str(root / "bad-home"),
            "BUSY": str(busy.getsockname()[1]),
            "CLOSED": str(closed.getsockname()[1]),
        }


@pytest.mark.parametrize(("args", "message"), BAD_INPUT, ids=[" ".join(a)[:60] for a, _ in BAD_INPUT])
def test_bad_input_to_any_command_is_one_line_that_says_what_to_do(
    args: list[str], message: str, places: dict[str, str], tmp_path: Path
) -> None:
    filled = [arg.format(**places) for arg in args]
    env = {**os.environ, "ROLLBOX_HOME": str(tmp_path / "home")}
    done = subprocess.run([*ROLLBOX, *filled], capture_output=True, text=True, timeout=60, check=False, env=env)
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    preface = 1 if args[0] == "run" and "jobs; results in" in done.stderr else 0  # rollbox run names its run first
    assert len(lines) == 1 + preface, done.stderr
    assert lines[-1].startswith(f"rollbox {args[0]}"), lines[-1]
    assert message.format(**places) in lines[-1], lines[-1]
