"""scripts/vm-cgroup2, the cgroup v2 run of the README's test command, finds the checkout wherever it lies.

The VM's /tmp and /run are tmpfs of its own, so a checkout under /tmp used to vanish inside it (status 127 after
every test had passed). This runs the script from a checkout under /tmp, as a clone there would be.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rollbox.sandbox.namespaces._cgroup import CgroupTree

REPO = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="scripts/vm-cgroup2 needs root"),
    pytest.mark.skipif(
        CgroupTree.detect().version != 1,
        reason="scripts/test runs the cgroup v2 VM only where this machine mounts cgroup v1",
    ),
]


def test_the_vm_runs_in_a_checkout_under_tmp(tmp_path: Path) -> None:
    checkout = tmp_path / "a checkout"  # a space too: the path is quoted on its way into the guest
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "vm-cgroup2", checkout / "scripts" / "vm-cgroup2")
    (checkout / "marker").write_text("the checkout\n")
    command = "cat marker && echo written-in-the-guest > planted && cat /sys/fs/cgroup/cgroup.controllers && exit 7"
    result = subprocess.run(
        [str(checkout / "scripts" / "vm-cgroup2"), "sh", "-c", command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "ROLLBOX_VM_TIMEOUT": "600"},
        check=False,
    )
    assert result.returncode == 7, result.stdout[-2000:] + result.stderr[-2000:]
    assert "the checkout" in result.stdout and "pids" in result.stdout, result.stdout[-2000:]
    assert not (checkout / "planted").exists()  # the guest writes over the checkout, never into it
