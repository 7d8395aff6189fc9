"""``rollbox run``, ``rollbox jobs`` and ``rollbox runs``: results files, resumption after Ctrl-C, the job store's
views."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rollbox.scheduler import JobSpec, JobStore, Requirements, exec_payload

ROLLBOX = [sys.executable, "-m", "rollbox"]


def make_task(root: Path, name: str) -> Path:
    task = root / name
    (task / "workspace").mkdir(parents=True)
    (task / "workspace" / "solution.py").write_text("print('todo')\n")
    (task / "solution").mkdir()
    (task / "solution" / "solution.py").write_text("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n")
    (task / "tests").mkdir()
    (task / "tests" / "cases.jsonl").write_text(json.dumps({"input": "1 2\n", "output": "3\n"}) + "\n")
    (task / "task.toml").write_text(f'id = "{name}"\n[grading]\nrunner = "stdio"\ncommand = "python3 solution.py"\n')
    return task


def rollbox(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROLLBOX_HOME": str(home)}
    return subprocess.run([*ROLLBOX, *args], check=False, capture_output=True, text=True, env=env, timeout=300)


def lines(home: Path, run_id: str) -> list[dict[str, object]]:
    text = (home / "runs" / run_id / "results.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.slow
def test_run_writes_one_result_per_task_and_sample_and_a_rerun_redoes_nothing(tmp_path: Path) -> None:
    make_task(tmp_path / "tasks", "add")
    make_task(tmp_path / "tasks", "sum")
    home = tmp_path / "home"
    done = rollbox(home, "run", str(tmp_path / "tasks"), "--policy", "reference", "--samples", "2", "--run-id", "r1")
    assert done.returncode == 0, done.stderr
    assert "4/4" in done.stderr and "run r1: 4 jobs" in done.stderr
    got = lines(home, "r1")
    assert [(x["task_id"], x["sample"], x["status"], x["reward"]) for x in got] == [
        ("add", 0, "passed", 1.0),
        ("add", 1, "passed", 1.0),
        ("sum", 0, "passed", 1.0),
        ("sum", 1, "passed", 1.0),
    ]
    again = rollbox(home, "run", str(tmp_path / "tasks"), "--policy", "reference", "--samples", "2", "--run-id", "r1")
    assert again.returncode == 0 and lines(home, "r1") == got  # nothing was run again
    listed = rollbox(home, "jobs", "--run", "r1", "--json")
    jobs = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(jobs) == 4 and {j["attempts"] for j in jobs} == {1} and {j["state"] for j in jobs} == {"completed"}
    shown = rollbox(home, "jobs", "show", str(jobs[0]["id"]))
    assert "pending -> scheduled" in shown.stdout.replace("  ", " ") or "-> scheduled" in shown.stdout
    assert "running -> grading" in shown.stdout and "grading -> completed" in shown.stdout
    assert "#1" in shown.stdout and "status passed" in shown.stdout
    runs = rollbox(home, "runs")
    assert runs.stdout.startswith("r1") and "4 jobs" in runs.stdout and "completed 4" in runs.stdout
    events = (home / "runs" / "r1" / "events.jsonl").read_text().splitlines()
    assert sum(json.loads(e)["kind"] == "job.transition" for e in events) == 4 * 5
    refused = rollbox(home, "run", str(tmp_path / "tasks"), "--policy", "telepathy")
    assert refused.returncode == 2 and "unknown policy 'telepathy'" in refused.stderr


def test_run_with_worker_processes_records_every_result_and_where_it_ran(tmp_path: Path) -> None:
    for name in ("add", "sum", "mul"):
        make_task(tmp_path / "tasks", name)
    home = tmp_path / "home"
    args = ["run", str(tmp_path / "tasks"), "--samples", "2", "--run-id", "r1", "--workers", "2", "--processes", "2"]
    done = rollbox(home, *args)
    assert done.returncode == 0, done.stderr
    got = lines(home, "r1")
    assert sorted((x["task_id"], x["sample"], x["status"], x["reward"]) for x in got) == [
        (name, sample, "passed", 1.0) for name in ("add", "mul", "sum") for sample in (0, 1)
    ]
    events = [json.loads(e) for e in (home / "runs" / "r1" / "events.jsonl").read_text().splitlines()]
    assert {e.get("node") for e in events if e["kind"] == "episode.end"} == {"local-0", "local-1"}
    refused = rollbox(home, "run", str(tmp_path / "tasks"), "--processes", "-1")
    assert refused.returncode == 2 and "--processes: must be a whole number from 0" in refused.stderr


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_the_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    make_task(tmp_path / "tasks", "add")
    home = tmp_path / "home"
    args = [*ROLLBOX, "run", str(tmp_path / "tasks"), "--samples", "40", "--run-id", "r", "--workers", "1"]
    child = subprocess.Popen(args, env={**os.environ, "ROLLBOX_HOME": str(home)}, stderr=subprocess.PIPE, text=True)
    results = home / "runs" / "r" / "results.jsonl"
    deadline = time.monotonic() + 120
    while not (results.exists() and len(results.read_text().splitlines()) >= 3):
        assert time.monotonic() < deadline and child.poll() is None
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 130, stderr
    assert "resume with --run-id r" in stderr
    before = lines(home, "r")
    assert 3 <= len(before) < 40
    done = rollbox(home, "run", str(tmp_path / "tasks"), "--samples", "40", "--run-id", "r", "--workers", "1")
    assert done.returncode == 0, done.stderr
    after = lines(home, "r")
    assert sorted(x["sample"] for x in after) == list(range(40))  # type: ignore[type-var]
    assert {x["status"] for x in after} == {"passed"}
    finished = {x["job_id"] for x in before}
    assert all(x["attempts"] == 1 for x in after if x["job_id"] in finished)  # finished work was not redone
    states = json.loads(rollbox(home, "runs", "--json").stdout)["counts"]
    assert states == {"completed": 40}


def _store_with_jobs(home: Path, count: int) -> Path:
    """A real job store holding ``count`` pending jobs of run ``r0``; returns its file."""
    store = JobStore(home / "jobs.db")
    specs = [JobSpec(kind="exec", payload=exec_payload(["echo", str(i)]), run_id="r0") for i in range(count)]
    store.submit([(spec, Requirements()) for spec in specs])
    store.close()  # its write-ahead log folded in: the file is the whole store
    return home / "jobs.db"


def _damage(store: Path, how: str) -> None:
    if how == "not-a-database":
        store.write_bytes(bytes(range(256)) * 256)
        return
    data = bytearray(store.read_bytes())  # every page but the first (the schema): malformed b-trees
    for start in range(4096, len(data), 4096):
        data[start + 100 : start + 4096] = (bytes(range(256)) * 16)[: 4096 - 100]
    store.write_bytes(data)


@pytest.mark.parametrize("how", ["not-a-database", "malformed"])
def test_a_damaged_job_store_is_named_with_what_to_do_and_left_as_it_was(tmp_path: Path, how: str) -> None:
    home = tmp_path / "home"
    store = _store_with_jobs(home, 300)
    _damage(store, how)
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    tasks = make_task(tmp_path / "tasks", "add")
    for command in (["jobs"], ["runs"], ["jobs", "show", "1"], ["run", str(tasks), "--run-id", "r1"]):
        done = rollbox(home, *command)
        assert done.returncode == 1 and "Traceback" not in done.stderr, (command, done.stderr)
        last = done.stderr.strip().splitlines()[-1]
        assert f"the job store {store} is damaged or is not a job store" in last, (command, done.stderr)
        assert f"mv {store} {store}.damaged" in last and ".recover" in last
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before  # nothing was written over it


def _occupy(store: Path, what: str) -> None:
    """Put ``what`` where the store's file belongs."""
    if what == "a directory":
        store.mkdir()
        (store / "notes.txt").write_text("mine\n")
    elif what == "a named pipe":
        os.mkfifo(store)
    else:
        store.symlink_to(store.name)  # a link to itself


@pytest.mark.parametrize("what", ["a directory", "a named pipe", "a symbolic link loop"])
def test_a_job_store_that_is_not_a_file_is_named_with_what_to_do_and_left_as_it_was(tmp_path: Path, what: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    store = home / "jobs.db"
    _occupy(store, what)
    before = os.lstat(store)
    tasks = make_task(tmp_path / "tasks", "add")
    commands = (
        ["jobs"],
        ["runs"],
        ["jobs", "show", "1"],
        ["run", str(tasks), "--run-id", "r1"],
        ["serve", "--port", "0"],
    )
    for command in commands:
        done = rollbox(home, *command)
        assert done.returncode == 1 and "Traceback" not in done.stderr, (command, done.stderr)
        (last,) = done.stderr.strip().splitlines()  # one line: nothing announced before the store was found unusable
        assert last.startswith(f"rollbox {command[0]}: the job store {store} is {what}"), (command, done.stderr)
        assert "left it as it is" in last and f"mv {store} {store}.aside" in last, last
    after = os.lstat(store)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)  # the same thing, still there
    if what == "a directory":
        assert os.listdir(store) == ["notes.txt"] and (store / "notes.txt").read_text() == "mine\n"


def test_a_job_store_this_user_cannot_read_is_named_with_what_to_do() -> None:
    # As root every file is readable: the command runs as nobody, in a child of this process (the interpreter's
    # files may be out of nobody's reach, so it is not started anew), on a store in a directory nobody can reach
    # (pytest's are root's alone).
    from rollbox.cli._main import main

    with tempfile.TemporaryDirectory() as top:
        home = Path(top) / "home"
        store = _store_with_jobs(home, 1)
        store.chmod(0o600)
        os.chmod(top, 0o755)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            code = 2
            try:
                sys.stderr = os.fdopen(write, "w")
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                os.environ["ROLLBOX_HOME"] = str(home)
                code = main(["jobs"])
                sys.stderr.flush()
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as stderr:
            said = stderr.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 1 and "Traceback" not in said, said
        assert said.startswith(f"rollbox jobs: the job store {store} is a file this user (uid 65534) cannot read"), said
        assert "chmod" in said and len(said.strip().splitlines()) == 1, said
        kept = JobStore(store)
        assert len(kept.jobs()) == 1  # still the store it was
        kept.close()


def _fill(disk: Path) -> Path:
    """Fill ``disk`` to its last block; returns the file that fills it."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 65536)
        with contextlib.suppress(OSError):
            while True:
                out.write(b"\0")
    return filler


def test_a_full_disk_stops_a_run_with_what_to_do_and_loses_nothing(tmp_path: Path, small_disk: Path) -> None:
    make_task(tmp_path / "tasks", "add")
    tasks, home = str(tmp_path / "tasks"), small_disk / "home"
    first = rollbox(home, "run", tasks, "--policy", "reference", "--run-id", "r1")
    assert first.returncode == 0, first.stderr
    filler = _fill(small_disk)
    full = rollbox(home, "run", tasks, "--policy", "reference", "--samples", "3", "--run-id", "r1")
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
    last = full.stderr.strip().splitlines()[-1]
    assert "the disk is full" in last or "free space on its disk" in last, full.stderr
    assert str(home) in last and "run again" in last
    listed = rollbox(home, "jobs", "--run", "r1", "--json")  # reading a store on a full disk: it works, or says why
    assert "Traceback" not in listed.stderr and (listed.returncode == 0 or "the disk is full" in listed.stderr)
    filler.unlink()
    again = rollbox(home, "run", tasks, "--policy", "reference", "--samples", "3", "--run-id", "r1")
    assert again.returncode == 0, again.stderr
    got = lines(home, "r1")
    assert [(x["sample"], x["status"]) for x in got] == [(0, "passed"), (1, "passed"), (2, "passed")]
    assert got[0]["attempts"] == 1  # the result committed before the disk filled was kept, not run again


def test_a_runs_files_that_cannot_be_written_are_named_with_what_to_do(tmp_path: Path) -> None:
    make_task(tmp_path / "tasks", "add")
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    (home / "runs" / "r1").write_text("a file where the run's directory goes")
    done = rollbox(home, "run", str(tmp_path / "tasks"), "--policy", "reference", "--run-id", "r1")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"cannot write {home / 'runs' / 'r1'}/" in last and f"check that {home / 'runs' / 'r1'} is writable" in last
    assert "the job store keeps every" in last or "every move of every job is in the job store" in last
    (home / "runs" / "r1").unlink()
    again = rollbox(home, "run", str(tmp_path / "tasks"), "--policy", "reference", "--run-id", "r1")
    assert again.returncode == 0 and [x["status"] for x in lines(home, "r1")] == ["passed"], again.stderr


@pytest.mark.slow
def test_the_commands_use_the_job_store_db_or_rollbox_db_names(tmp_path: Path, postgres_url: str) -> None:
    """``--db URL`` (or ``$ROLLBOX_DB``) puts rollbox run's jobs in a PostgreSQL store, and rollbox jobs and runs read
    them there; nothing is written to the home's SQLite file."""
    make_task(tmp_path / "tasks", "add")
    home = tmp_path / "home"
    done = rollbox(home, "run", str(tmp_path / "tasks"), "--samples", "2", "--run-id", "r1", "--db", postgres_url)
    assert done.returncode == 0, done.stderr
    assert [(x["task_id"], x["status"]) for x in lines(home, "r1")] == [("add", "passed"), ("add", "passed")]
    assert not (home / "jobs.db").exists()
    listed = rollbox(home, "jobs", "--db", postgres_url, "--json")
    assert [json.loads(line)["state"] for line in listed.stdout.splitlines()] == ["completed", "completed"]
    shown = rollbox(home, "jobs", "--db", postgres_url, "show", "1")
    assert "grading -> completed" in shown.stdout, shown.stderr
    env = {**os.environ, "ROLLBOX_HOME": str(home), "ROLLBOX_DB": postgres_url}
    runs = subprocess.run([*ROLLBOX, "runs", "--json"], capture_output=True, text=True, env=env, check=True)
    assert json.loads(runs.stdout)["counts"] == {"completed": 2}
    store = JobStore(postgres_url)
    assert store.counts("r1")["completed"] == 2
    store.close()
    unreachable = "postgresql://rollbox:hunter2@127.0.0.1:1/none?connect_timeout=5"
    for command in (["jobs"], ["runs"], ["run", str(tmp_path / "tasks"), "--run-id", "r2"]):
        failed = rollbox(home, *command, "--db", unreachable)
        assert failed.returncode == 1 and "Traceback" not in failed.stderr, (command, failed.stderr)
        last = failed.stderr.strip().splitlines()[-1]
        assert "cannot be reached" in last and "hunter2" not in failed.stderr, (command, failed.stderr)


def test_jobs_and_runs_show_what_a_submitter_wrote_and_never_send_its_escapes_to_the_terminal(tmp_path: Path) -> None:
    home = tmp_path / "home"
    evil = "\x1b]0;pwned\x07\x1b[2J\x1b[31mFAKE\x1b[0m\x9b2J\r"
    store = JobStore(home / "jobs.db")
    spec = JobSpec(kind="exec", payload=exec_payload(["true"]), key=f"k{evil}", run_id=f"r{evil}", tenant=f"t{evil}")
    ((job, _),) = store.submit([(spec, Requirements())])
    store.close()
    for command in (["jobs"], ["jobs", "show", str(job.id)], ["runs"]):
        done = rollbox(home, *command)
        assert done.returncode == 0, done.stderr
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", done.stdout), (command, done.stdout)
        assert "\\x1b]0;pwned\\x07" in done.stdout, (command, done.stdout)  # shown, to be read
