"""rollbox's temporary directories (scratch in memory, others on disk): what a killed process left is taken back by
the next; a live one's is never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rollbox.sandbox._scratch import remove_tree

#: Makes a grading's and an episode's scratch directory, a validation's and a ``process`` sandbox's temporary
#: directory (the last holding a tree deeper than Python's rmtree can walk), says where, and waits to be killed.
CHILD = """
import os, sys, time
from rollbox.sandbox import make_temporary_directory, scratch_directory, temporary_directory
kept = [scratch_directory("rollbox-grade-"), scratch_directory("rollbox-episode-")]
kept.append(temporary_directory("rollbox-validate-"))
names = [d.name for d in kept] + [str(make_temporary_directory("rollbox-process-"))]
for name in names:
    open(name + "/file", "w").write("x")
os.chdir(names[-1])
for _ in range(3000):
    os.mkdir("d")
    os.chdir("d")
print(" ".join(names), flush=True)
time.sleep(600)
"""

#: Makes one directory of each kind in a fresh process: the first of a process in a place sweeps what dead ones left.
SWEEP = """
from rollbox.sandbox import scratch_directory, temporary_directory
scratch_directory("rollbox-grade-").cleanup()
temporary_directory("rollbox-synth-").cleanup()
"""


PURPOSES = ("grade", "episode", "validate", "process")


def _environment(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "memory").mkdir(exist_ok=True)
    (tmp_path / "disk").mkdir(exist_ok=True)
    return {**os.environ, "ROLLBOX_SCRATCH_DIR": str(tmp_path / "memory"), "TMPDIR": str(tmp_path / "disk")}


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], list[str]]:
    env = _environment(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    return child, child.stdout.readline().split()


def test_a_killed_process_s_directories_are_removed_by_the_next_and_a_live_one_s_kept(tmp_path: Path) -> None:
    env = _environment(tmp_path)
    killed, left = _start(tmp_path)
    alive, kept = _start(tmp_path)
    unrelated = [tmp_path / "memory" / "rollbox-notes", tmp_path / "disk" / "rollbox-notes"]  # not our names
    for directory in unrelated:
        directory.mkdir()
    try:
        assert len(left) == 4 and all(Path(d, "file").exists() for d in left + kept)
        assert [Path(d).parent.name for d in left] == ["memory", "memory", "disk", "disk"]
        names = [Path(d).name for d in left]
        assert all(name.startswith(f"rollbox-{what}-{killed.pid}-") for name, what in zip(names, PURPOSES, strict=True))
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        assert all(Path(d).exists() for d in left)  # SIGKILL runs no cleanup
        subprocess.run([sys.executable, "-c", SWEEP], env=env, check=True)
        assert not any(Path(d).exists() for d in left)
        assert all(Path(d, "file").exists() for d in kept) and all(d.is_dir() for d in unrelated)
    finally:
        for child in (killed, alive):
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
                child.wait()
            assert child.stdout is not None
            child.stdout.close()
        remove_tree(tmp_path)  # the live one's deep tree: pytest's own clean-up (rmtree) would overflow on it


@pytest.mark.parametrize("prefix", ["rollbox-grade-", "rollbox-episode-", "rollbox-reference-"])
def test_a_scratch_directory_names_its_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    from rollbox.sandbox import scratch_directory

    monkeypatch.setenv("ROLLBOX_SCRATCH_DIR", str(tmp_path))
    with scratch_directory(prefix) as made:
        assert Path(made).parent == tmp_path and Path(made).name.startswith(f"{prefix}{os.getpid()}-")
