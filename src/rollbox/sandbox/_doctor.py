"""What isolation this machine really gives, each feature checked for real with the fix when it is missing, and
how many live sandboxes it can hold (see ``_capacity``)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._capacity import Capacity, measure
from ._errors import RollboxError
from ._kernel import open_files_ceiling
from ._limits import Limits
from .agent._build import agent_binary
from .images._store import ImageStore
from .namespaces._cgroup import CgroupTree

__all__ = ["Check", "diagnose"]


@dataclass(frozen=True)
class Check:
    """One feature: whether it works here, what was seen, and how to fix it when it does not."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return asdict(self)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _static_checks() -> list[Check]:
    checks: list[Check] = []
    root = os.geteuid() == 0
    checks.append(
        Check(
            "root",
            root,
            "running as root" if root else f"running as uid {os.geteuid()}",
            None if root else "run rollbox as root (it manages cgroups and mounts)",
        )
    )
    # rollbox makes the namespaces as root: limits on unprivileged user namespaces (Debian's sysctl, AppArmor's
    # restriction) do not apply; this one does.
    max_ns = _read("/proc/sys/user/max_user_namespaces")
    userns_ok = max_ns not in (None, "0")
    checks.append(
        Check(
            "user namespaces",
            userns_ok,
            f"user.max_user_namespaces={max_ns}",
            None if userns_ok else "sysctl -w user.max_user_namespaces=65536",
        )
    )
    try:
        tree = CgroupTree.detect()
        parents = ", ".join(f"{c or 'unified'}:{p}" for c, p in tree.parents.items())
        checks.append(Check("cgroups", True, f"cgroup v{tree.version}; sandboxes under {parents}"))
    except RollboxError as exc:
        checks.append(Check("cgroups", False, str(exc), "mount cgroup2 at /sys/fs/cgroup with memory and pids"))
    ceiling, wanted = open_files_ceiling(), Limits().open_files
    checks.append(
        Check(
            "open files",
            ceiling >= wanted,
            f"a command may have up to {ceiling:,} open files (Limits.open_files defaults to {wanted:,})",
            None
            if ceiling >= wanted
            else "raise rollbox's hard limit on open files (ulimit -Hn), or give it CAP_SYS_RESOURCE, or lower "
            "Limits.open_files",
        )
    )
    try:
        checks.append(Check("native agent", True, f"built at {agent_binary()}"))
    except RollboxError as exc:
        checks.append(Check("native agent", False, str(exc), "apt-get install gcc libc6-dev (or set CC)"))
    return checks


_PROBE = r"""
st = {k: v.strip() for k, v in (l.split(':', 1) for l in open('/proc/self/status'))}
import os, socket, ctypes
libc = ctypes.CDLL(None, use_errno=True)
print('seccomp', st['Seccomp'] == '2')
print('no_new_privs', st['NoNewPrivs'] == '1')
print('no_capabilities', int(st['CapEff'], 16) == 0 and int(st['CapBnd'], 16) == 0)
print('unprivileged_uid', os.getuid() != 0)
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print('pid_namespace', pids[0] == 1 and len(pids) < 10)
print('mount_refused', libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) != 0)
print('userns_refused', libc.unshare(0x10000000) != 0)
print('host_files_hidden', not os.path.exists('/root/.bashrc') and not os.path.exists('/home'))
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM); print('network_none', False)
except OSError:
    print('network_none', True)
"""


async def _sandbox_checks() -> list[Check]:
    from ._sandbox import run

    result = await run(["python3", "-I", "-c", _PROBE])
    if not result.ok:
        return [
            Check(
                "sandbox",
                False,
                result.error or result.stderr_text[-500:] or result.status.value,
                "see the checks above; `rollbox exec --json -- true` shows the full error",
            )
        ]
    seen = dict(line.split(" ", 1) for line in result.stdout_text.splitlines())
    checks = [Check("sandbox", True, f"started and ran python3 in {result.wall_s * 1000:.1f} ms")]
    for name in (
        "seccomp",
        "no_new_privs",
        "no_capabilities",
        "unprivileged_uid",
        "pid_namespace",
        "mount_refused",
        "userns_refused",
        "host_files_hidden",
        "network_none",
    ):
        ok = seen.get(name) == "True"
        checks.append(
            Check(
                name.replace("_", " "),
                ok,
                "verified inside a sandbox" if ok else "NOT in force",
                None if ok else "report this: the namespaces backend should always give it",
            )
        )
    return checks


def _capacity_checks(capacity: Capacity) -> list[Check]:
    """One line per limit on live sandboxes, then the sum of them: how many this host, and one process, can hold."""
    checks = [
        Check(
            f"capacity: {limit.resource}",
            True,
            f"{limit.sandboxes:,} more sandboxes{' per process' if limit.per_process else ''}: {limit.detail}",
            limit.fix,
        )
        for limit in capacity.limits
    ]
    per_process, host = capacity.per_process, capacity.host
    summary = f"about {host.sandboxes:,} more live sandboxes on this host ({host.resource} run out first)"
    if per_process.per_process:
        summary += f"; one process holds at most {per_process.sandboxes:,} ({per_process.resource} run out first)"
    return [*checks, Check("capacity", True, summary)]


async def _measured_checks() -> list[Check]:
    checks = await _sandbox_checks()
    if all(c.ok for c in checks):
        checks += _capacity_checks(await measure())
    return checks


def _image_checks(store: ImageStore | None = None) -> list[Check]:
    """The images sandboxes can run on here: each by digest and references, with its root there or not."""
    store = store or ImageStore()
    images = store.list()
    checks = [Check("images", True, f"{len(images)} in {store.home}" + ("" if images else " (none imported)"))]
    for image in images:
        there = image.root.is_dir()
        named = ", ".join(image.refs) or "no reference"
        checks.append(
            Check(
                f"image {image.short}",
                there,
                f"{image.digest} ({named}; {image.platform}, {image.size_bytes / 2**20:.1f} MiB)"
                + ("" if there else ": its root is missing"),
                None if there else f"import it again ('rollbox images import' or 'rollbox images pull {named}')",
            )
        )
    return checks


def diagnose() -> list[Check]:
    """Check every isolation feature on this machine, the last ones from inside a real sandbox; then measure how
    many live sandboxes it can hold; then list the images sandboxes can run on."""
    checks = _static_checks()
    if all(c.ok for c in checks):
        checks += asyncio.run(_measured_checks())
    return checks + _image_checks()
