"""A PostgreSQL server of the test session's own: Debian's server (``postgresql-15``, which scripts/setup installs)
made with ``initdb`` in a temporary directory, run as the ``postgres`` user on a free port of 127.0.0.1, stopped
and removed when the session ends. Each test gets a schema of its own in it (a URL with that ``search_path``).

Fixtures: ``postgres_server`` (the server), ``postgres_url`` (a fresh schema's URL), and ``store_target``, a fresh
job store of each kind in turn (parametrized: a SQLite file, then a PostgreSQL URL), for tests that every store
must pass.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_USER = "postgres"
_names = itertools.count()


def binaries() -> Path | None:
    """The newest installed server's ``bin`` directory."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """A server started by this test session (as the ``postgres`` user when the session runs as root)."""

    def __init__(self, binaries: Path) -> None:
        self.binaries = binaries
        self.data = Path(tempfile.mkdtemp(prefix="rollbox-test-pg-"))
        self.port = free_port()
        self.as_user: list[str] = []
        if os.getuid() == 0:  # initdb refuses to run as root
            account = pwd.getpwnam(_USER)
            os.chown(self.data, account.pw_uid, account.pw_gid)
            self.as_user = ["runuser", "-u", _USER, "--"]
        self._run("initdb", "-D", str(self.data), "-U", "rollbox", "-A", "trust", "-E", "UTF8", "--no-sync")
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.data}"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.data / "server.log"), "-w", "-t", "60",
                  "-o", options, "start")  # fmt: skip
        self.url = f"postgresql://rollbox@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.binaries / program), *args], check=True, capture_output=True)

    def schema(self) -> str:
        """A new, empty schema; the URL whose connections use it."""
        import psycopg

        name = f"t{os.getpid()}_{next(_names)}"
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(f"CREATE SCHEMA {name}")
        return f"{self.url}?options=-csearch_path%3D{name}"

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.data, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's server (skipped, saying why, where none can be started here)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'rollbox[postgres]' (the dev extra has it)")
    found = binaries()
    if found is None:
        pytest.skip("the PostgreSQL server is not installed: apt-get install postgresql-15 (scripts/setup does)")
    server = PostgresServer(found)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A job store's URL: an empty schema of the session's server."""
    return postgres_server.schema()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """A new job store of each kind in turn: a SQLite file, then a PostgreSQL URL."""
    if request.param == "sqlite":
        return tmp_path / "jobs.db"
    return str(request.getfixturevalue("postgres_url"))
