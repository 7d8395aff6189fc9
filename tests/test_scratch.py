"""Scratch directories: what a killed process left is taken back by the next; a live one's is never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

#: Makes a grading's and an episode's scratch directory, says where, and waits to be killed.
CHILD = """
import sys, time
from rollbox.sandbox import scratch_directory
kept = [scratch_directory("rollbox-grade-"), scratch_directory("rollbox-episode-")]
for d in kept:
    open(d.name + "/file", "w").write("x")
print(" ".join(d.name for d in kept), flush=True)
time.sleep(600)
"""

#: Makes one scratch directory in a fresh process: the first of a process sweeps what dead ones left.
SWEEP = "from rollbox.sandbox import scratch_directory\nscratch_directory('rollbox-grade-').cleanup()\n"


def _start(scratch: Path) -> tuple[subprocess.Popen[str], list[str]]:
    env = {**os.environ, "ROLLBOX_SCRATCH_DIR": str(scratch)}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    return child, child.stdout.readline().split()


def test_a_killed_process_s_scratch_is_removed_by_the_next_and_a_live_one_s_kept(tmp_path: Path) -> None:
    env = {**os.environ, "ROLLBOX_SCRATCH_DIR": str(tmp_path)}
    killed, left = _start(tmp_path)
    alive, kept = _start(tmp_path)
    unrelated = tmp_path / "rollbox-notes"  # not a scratch directory's name: never touched
    unrelated.mkdir()
    try:
        assert len(left) == 2 and all(Path(d, "file").exists() for d in left + kept)
        assert all(Path(d).name.startswith(("rollbox-grade-", "rollbox-episode-")) for d in left)
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        assert all(Path(d).exists() for d in left)  # SIGKILL runs no cleanup
        subprocess.run([sys.executable, "-c", SWEEP], env=env, check=True)
        assert not any(Path(d).exists() for d in left)
        assert all(Path(d, "file").exists() for d in kept) and unrelated.is_dir()
    finally:
        for child in (killed, alive):
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
                child.wait()
            assert child.stdout is not None
            child.stdout.close()


@pytest.mark.parametrize("prefix", ["rollbox-grade-", "rollbox-episode-", "rollbox-reference-"])
def test_a_scratch_directory_names_its_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    from rollbox.sandbox import scratch_directory

    monkeypatch.setenv("ROLLBOX_SCRATCH_DIR", str(tmp_path))
    with scratch_directory(prefix) as made:
        assert Path(made).parent == tmp_path and Path(made).name.startswith(f"{prefix}{os.getpid()}-")
