"""The workers of one ``rollbox serve``, as each of them (and the supervisor) sees them.

A worker is named by its slot (0 to ``workers - 1``) and the generation of the process in that slot (a worker that
dies is replaced by the next generation), and, on a service of several hosts, by its node: ``a.1.0`` is node
``a``'s slot 1, first generation. A sandbox's or an episode's id carries the name of the worker that holds it
(``sb_a.1.0_TOKEN``), so that any worker, and a proxy in front of several hosts, can tell where a request for it
belongs without asking anyone.

The workers of a service find each other through one directory of its own (mode 0700, made by the supervisor):
``SLOT.GEN.sock``, each worker's Unix socket (its requests forwarded by the others); ``slot-SLOT.sock``, a link to
the socket of the worker serving that slot now (swapped when a new generation is ready); ``SLOT.GEN.died``, the
supervisor's record of a worker's death (its pid, how it ended, when), which turns every later request for that
worker's sandboxes into an error that says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from rollbox.sandbox import signal_name

__all__ = ["Death", "Owner", "Peers", "how_it_ended", "new_id", "owner_of", "valid_node"]

_NODE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?")
_OWNER = re.compile(r"(?:(?P<node>[a-z0-9-]+)\.)?(?P<slot>\d{1,4})\.(?P<generation>\d{1,9})")


def valid_node(name: str) -> bool:
    """Whether ``name`` can name a node: lowercase letters, digits and inner hyphens, at most 32 (a DNS label's
    shape, so that a proxy's pattern can match it)."""
    return _NODE.fullmatch(name) is not None


@dataclass(frozen=True, order=True)
class Owner:
    """A worker process of the service: its node (``None`` on a service of one host), slot and generation."""

    node: str | None
    slot: int
    generation: int

    def __str__(self) -> str:
        return (f"{self.node}." if self.node else "") + f"{self.slot}.{self.generation}"


def new_id(kind: str, owner: Owner) -> str:
    """A new id for a thing of ``kind`` (``sb``, ``ep``) that ``owner`` holds: ``KIND_OWNER_TOKEN``."""
    return f"{kind}_{owner}_{secrets.token_urlsafe(12)}"


def owner_of(entry_id: str) -> Owner | None:
    """The worker an id says holds its thing (``None`` for an id not made by :func:`new_id`)."""
    parts = entry_id.split("_", 2)
    if len(parts) != 3:
        return None
    found = _OWNER.fullmatch(parts[1])
    if found is None:
        return None
    return Owner(found["node"], int(found["slot"]), int(found["generation"]))


def how_it_ended(returncode: int) -> str:
    """A process's end in words: ``killed by SIGKILL``, ``exited with status 1``."""
    if returncode < 0:
        return f"killed by {signal_name(-returncode)}"
    return f"exited with status {returncode}"


@dataclass(frozen=True)
class Death:
    """How a worker ended: its pid, in words (:func:`how_it_ended`), and when."""

    pid: int
    how: str
    at: float


class Peers:
    """The service's directory of workers, as the worker ``me`` (or, with ``me`` ``None``, the supervisor) sees it.

    Args:
        directory: The service's own directory (made by the supervisor, mode 0700).
        workers: How many slots the service has.
        node: The node's name on a service of several hosts.
        me: This worker.
    """

    def __init__(self, directory: Path, *, workers: int, node: str | None, me: Owner | None = None) -> None:
        self.directory, self.workers, self.node, self.me = directory, workers, node, me

    def socket(self, owner: Owner) -> Path:
        """Where ``owner`` listens for the requests the others forward to it."""
        return self.directory / f"{owner.slot}.{owner.generation}.sock"

    def _link(self, slot: int) -> Path:
        return self.directory / f"slot-{slot}.sock"

    def publish(self) -> None:
        """Make this worker the one serving its slot (once it is ready)."""
        assert self.me is not None, "only a worker publishes itself"
        temporary = self.directory / f".slot-{self.me.slot}.{os.getpid()}"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(self.socket(self.me).name)
        temporary.replace(self._link(self.me.slot))

    def current(self, slot: int) -> Owner | None:
        """The worker serving ``slot`` now (``None`` while none is ready, or for a slot the service does not have)."""
        if not 0 <= slot < self.workers:
            return None
        try:
            target = os.readlink(self._link(slot))
        except OSError:
            return None
        found = _OWNER.fullmatch(target.removesuffix(".sock"))
        return Owner(self.node, slot, int(found["generation"])) if found else None

    def record_death(self, owner: Owner, pid: int, returncode: int) -> Death:
        """Write down that ``owner`` (process ``pid``) ended with ``returncode`` (the supervisor does)."""
        death = Death(pid, how_it_ended(returncode), time.time())
        path = self.directory / f"{owner.slot}.{owner.generation}.died"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"pid": death.pid, "how": death.how, "at": death.at}))
        temporary.replace(path)
        self.socket(owner).unlink(missing_ok=True)
        return death

    def death(self, owner: Owner) -> Death | None:
        """How ``owner`` died, when the supervisor has written it down."""
        try:
            data = json.loads((self.directory / f"{owner.slot}.{owner.generation}.died").read_text())
        except (OSError, ValueError):
            return None
        return Death(int(data["pid"]), str(data["how"]), float(data["at"]))

    def existed(self, owner: Owner) -> bool:
        """Whether ``owner`` was ever a worker of this service (a later generation of its slot, or a record of its
        death, shows that it was)."""
        if owner.node != self.node or not 0 <= owner.slot < self.workers:
            return False
        now = self.current(owner.slot)
        return (now is not None and owner.generation <= now.generation) or self.death(owner) is not None

    def slot_for(self, key: str) -> int:
        """The slot whose worker serves requests carrying idempotency key ``key`` (the same for every worker)."""
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.workers

    def others(self) -> list[Owner]:
        """The workers other than this one serving their slots now."""
        found = (self.current(slot) for slot in range(self.workers) if self.me is None or slot != self.me.slot)
        return [owner for owner in found if owner is not None]

    def cleanup(self) -> None:
        """Remove the directory's files (the supervisor, when the service stops)."""
        for path in self.directory.iterdir():
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            self.directory.rmdir()
