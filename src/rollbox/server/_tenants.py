"""Tenants and their API keys. Keys are stored only as SHA-256 digests: the file never holds a usable key.

The tenants file (JSON, by default ``$ROLLBOX_HOME/tenants.json``, written with mode 0600)::

    {"tenants": {"team-a": {"admin": false, "rate_per_s": 50, "burst": 100, "max_in_flight": 64,
                            "max_sandboxes": 32, "keys": [{"id": "k1a2b3", "sha256": "...", "created": 1.7e9}]}}}

A key is ``rbx_`` followed by 43 random URL-safe characters (256 bits): a plain digest is enough to store such
a key (no dictionary can guess it), and looking it up costs one hash.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Tenant", "TenantStore"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: The largest burst a token bucket (a float) holds exactly.
_MAX_BURST = 2**53


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """Who a request comes from, and what it may use."""

    name: str
    #: Sees every tenant's figures on the dashboard (never another's sandboxes or jobs).
    admin: bool = False
    #: Requests per second, on average; ``burst`` at once.
    rate_per_s: float = 50.0
    burst: int = 100
    #: Executions (run_code, exec, grade, submit) running or waiting at once; more get 429.
    max_in_flight: int = 256
    #: Sandboxes open at once through the sandboxes API.
    max_sandboxes: int = 32
    #: Its jobs (``/v1/jobs``) holding a worker at once, the scheduler's quota; ``None``: only the workers'
    #: capacity bounds them (a tenant with a deep queue then takes every slot as it frees).
    max_running_jobs: int | None = None
    keys: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if not _rate(self.rate_per_s):  # its bucket divides by it
            raise ValueError(
                "rate_per_s must be a finite number of requests per second above 0 (as 0.5 or 50), got "
                f"{self.rate_per_s!r}"
            )
        for name in ("burst", "max_in_flight", "max_sandboxes"):
            count = getattr(self, name)
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ValueError(f"{name} must be a positive integer (as 1 or 100), got {count!r}")
        if self.burst > _MAX_BURST:  # its bucket holds it as a float
            raise ValueError(f"burst must be at most 2**53 ({_MAX_BURST}), got {self.burst!r}")
        quota = self.max_running_jobs
        if quota is not None and (not isinstance(quota, int) or isinstance(quota, bool) or quota < 1):
            raise ValueError(f"max_running_jobs must be a positive integer or null, got {quota!r}")


def _rate(rate: object) -> bool:
    """Whether ``rate`` is a rate a token bucket can use: a number (never a bool) above 0, finite, whose
    reciprocal (the seconds a token takes to come back) is finite too."""
    if not isinstance(rate, int | float) or isinstance(rate, bool):
        return False
    try:
        return math.isfinite(rate) and rate > 0 and math.isfinite(1 / rate)
    except OverflowError:  # an int beyond any float
        return False


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class TenantStore:
    """The tenants file, read at start, read again by :meth:`refresh` when it changed (a key added or revoked by
    another process, a setting edited), and rewritten when a key is added or revoked here.

    Raises:
        ValueError: the file exists and is not a tenants file (the message names it and what is wrong).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._tenants: dict[str, Tenant] = {}
        self._by_digest: dict[str, str] = {}
        #: The file as it was when last read (inode, modification time, size): a change is a new one.
        self._seen: tuple[int, int, int] | None = None
        if self.path.exists():
            self._seen = self._version()
            self._load()

    def _version(self) -> tuple[int, int, int] | None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def refresh(self) -> bool:
        """Read the file again if it changed since it was last read (a missing file holds no tenant); returns
        whether it changed.

        Raises:
            ValueError: the file changed into something that is not a tenants file; the tenants read before stay in
                force (and it is not read again until it changes again).
        """
        version = self._version()
        if version == self._seen:
            return False
        with self._lock:
            self._seen = version
            if version is None:
                self._tenants, self._by_digest = {}, {}
            else:
                self._load()
        return True

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            tenants = {name: Tenant(name=name, **_fields(entry)) for name, entry in data["tenants"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(
                f"{self.path} is not a rollbox tenants file ({type(exc).__name__}: {exc}); fix it or move it away"
            ) from exc
        self._tenants = tenants
        self._by_digest = {k["sha256"]: t.name for t in tenants.values() for k in t.keys}

    def _save(self) -> None:
        data = {
            "tenants": {name: {k: v for k, v in asdict(t).items() if k != "name"} for name, t in self._tenants.items()}
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staging = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
        staging.replace(self.path)
        self._seen = self._version()

    @property
    def empty(self) -> bool:
        """No tenant has a key: with auth on, nobody could call the service."""
        return not self._by_digest

    def tenants(self) -> list[Tenant]:
        """Every tenant."""
        return list(self._tenants.values())

    def add_key(self, tenant: str, **settings: Any) -> str:
        """Make a new key for ``tenant`` (created with ``settings`` if new; else its settings are updated with
        them); returns the key, which is shown only now.

        Raises:
            ValueError: the name is not 1-64 letters, digits, ``_``, ``.`` or ``-``, or a setting is unknown.
        """
        if not _NAME.match(tenant):
            raise ValueError(f"invalid tenant name {tenant!r}: use 1-64 letters, digits, '_', '.' or '-'")
        key = "rbx_" + secrets.token_urlsafe(32)
        entry: dict[str, Any] = {"id": secrets.token_hex(4), "sha256": _digest(key), "created": time.time()}
        with self._lock:
            current = self._tenants.get(tenant, Tenant(name=tenant))
            merged = {**asdict(current), **settings, "keys": (*current.keys, entry)}
            self._tenants[tenant] = Tenant(**merged)
            self._by_digest[entry["sha256"]] = tenant
            self._save()
        return key

    def revoke(self, tenant: str) -> int:
        """Revoke every key of ``tenant``; returns how many there were."""
        with self._lock:
            current = self._tenants.get(tenant)
            if current is None:
                return 0
            for k in current.keys:
                self._by_digest.pop(k["sha256"], None)
            self._tenants[tenant] = Tenant(**{**asdict(current), "keys": ()})
            self._save()
            return len(current.keys)

    def authenticate(self, key: str) -> Tenant | None:
        """The tenant whose key this is, or ``None``."""
        name = self._by_digest.get(_digest(key))
        return self._tenants.get(name) if name is not None else None


def _fields(entry: dict[str, Any]) -> dict[str, Any]:
    known = {"admin", "rate_per_s", "burst", "max_in_flight", "max_sandboxes", "max_running_jobs", "keys"}
    unknown = set(entry) - known
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; known: {sorted(known)}")
    return {**entry, "keys": tuple(entry.get("keys", ()))}
