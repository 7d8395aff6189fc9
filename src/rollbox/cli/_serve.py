"""``rollbox serve``: the HTTP service (and its API keys)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._args import PORT, positive_seconds, run_name, whole
from ._terminal import printable

_HELP = """\
Serve rollbox over HTTP: sandboxes, grading, SandboxFusion's /run_code and /submit, /metrics, the dashboard
(/dashboard) and the OpenAPI spec (/openapi.json). Auth (API keys per tenant) is on whenever --host is not a
loopback address; make keys with --add-key.

examples:
  rollbox serve                                      127.0.0.1:8080, no auth
  rollbox serve --add-key team-a                     print a new API key for tenant team-a, and exit
  rollbox serve --host 0.0.0.0 --tasks-dir tasks/    auth on; serve the tasks under tasks/
  rollbox serve --workers 4                          4 worker processes (sandboxes and episodes included)
  rollbox serve --archive s3://bucket/rollbox        archive events to S3 (credentials as for boto3)
  rollbox serve --alert-rules rules.yml              write the Prometheus alert rules, and exit
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` to the command line."""
    parser = commands.add_parser(
        "serve",
        help="serve rollbox over HTTP (SandboxFusion-compatible)",
        description=_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=PORT, default=8080, help="port (default 8080; 0: any free one)")
    parser.add_argument("--workers", type=whole(1, 1024), default=1, help="worker processes (default 1)")
    parser.add_argument(
        "--node", metavar="NAME", help="this host's name behind a proxy of several hosts (in sandbox ids; see docs)"
    )
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument("--auth", dest="auth", action="store_true", default=None, help="require API keys")
    auth.add_argument("--no-auth", dest="auth", action="store_false", help="require none (even off loopback)")
    parser.add_argument("--home", type=Path, help="state directory (default $ROLLBOX_HOME or ~/.rollbox)")
    parser.add_argument(
        "--db", metavar="URL", help="the job store: postgresql://... or a file (default $ROLLBOX_DB, else HOME/jobs.db)"
    )
    parser.add_argument(
        "--tenants", type=Path, metavar="FILE", help="the tenants and their hashed keys (default HOME/tenants.json)"
    )
    parser.add_argument("--tasks-dir", type=Path, help="a directory of task directories to serve")
    parser.add_argument("--archive", help="fsspec URL of the archive (default HOME/archive; '' turns it off)")
    parser.add_argument(
        "--run", dest="run_id", type=run_name, help="the run id of this service's work (default serve-DATE-TIME)"
    )
    parser.add_argument(
        "--idle-timeout", type=positive_seconds, help="seconds before an unused sandbox is closed (300)"
    )
    parser.add_argument(
        "--body-timeout", type=positive_seconds, help="seconds a request's body may take to arrive, else 408 (60)"
    )
    parser.add_argument(
        "--stream-keepalive",
        type=positive_seconds,
        metavar="S",
        help="seconds of silence after which a run's results stream sends a blank line, so that proxies keep it (15)",
    )
    parser.add_argument("--pool-size", type=whole(1, 4096), help="warm sandboxes per configuration (twice the CPUs)")
    parser.add_argument(
        "--language-images",
        metavar="host|recipes|IMAGE",
        help="where /run_code runs each language: the host's toolchains (host, the default), each language's image "
        "built from its recipe on first use (recipes), or one image for all (a store reference or layout directory)",
    )
    parser.add_argument("--add-key", metavar="TENANT", help="print a new API key for TENANT, and exit")
    parser.add_argument("--admin", action="store_true", help="with --add-key: the tenant sees every tenant's figures")
    parser.add_argument("--revoke", metavar="TENANT", help="revoke every key of TENANT, and exit")
    parser.add_argument("--alert-rules", type=Path, metavar="FILE", help="write Prometheus alert rules, and exit")
    parser.set_defaults(run=_serve)


def _fail(message: str, code: int = 2) -> int:
    print(printable(f"rollbox serve: {message}"), file=sys.stderr)
    return code


def _serve(args: argparse.Namespace) -> int:
    try:
        from rollbox.server import ServerConfig, TenantStore, serve
        from rollbox.telemetry import prometheus_rules
    except ImportError as exc:
        return _fail(f"it needs the server extra: pip install 'rollbox[server]' ({exc})")
    settings: dict[str, object] = {"host": args.host, "port": args.port, "workers": args.workers, "auth": args.auth}
    for name, value in (
        ("home", args.home),
        ("db", args.db),
        ("tenants_file", args.tenants),
        ("tasks_dir", args.tasks_dir),
        ("archive_url", args.archive),
        ("run", args.run_id),
        ("idle_timeout_s", args.idle_timeout),
        ("pool_size", args.pool_size),
        ("body_timeout_s", args.body_timeout),
        ("stream_keepalive_s", args.stream_keepalive),
        ("node", args.node),
        ("language_images", args.language_images),
    ):
        if value is not None:
            settings[name] = value
    try:
        config = ServerConfig(**settings)  # type: ignore[arg-type]
    except ValueError as exc:
        return _fail(str(exc))
    if config.home.exists() and not config.home.is_dir():
        return _fail(f"--home {config.home} is not a directory: give the service's state directory")
    if config.tasks_dir is not None and not config.tasks_dir.is_dir():
        return _fail(f"--tasks-dir {config.tasks_dir} is not a directory: give a directory of task directories")
    if args.alert_rules is not None:
        try:
            args.alert_rules.write_text(prometheus_rules())
        except OSError as exc:
            return _fail(f"cannot write --alert-rules {args.alert_rules} ({exc.strerror}): choose a writable FILE")
        print(printable(f"wrote {args.alert_rules}"))
        return 0
    if args.add_key is not None or args.revoke is not None:  # '' too: an invalid name, never a serve
        try:
            store = TenantStore(config.tenants_path)
            if args.revoke is not None:
                revoked = store.revoke(args.revoke)
                when = "a service running on this home refuses them within a second"
                print(printable(f"revoked {revoked} keys of {args.revoke!r} ({when})"))
                return 0
            print(store.add_key(args.add_key, **({"admin": True} if args.admin else {})))
        except ValueError as exc:
            return _fail(str(exc))
        except OSError as exc:
            return _fail(f"cannot write {config.tenants_path} ({exc.strerror}): check that --home is writable")
        print(
            f"(stored hashed in {config.tenants_path}; this key is shown only now; a service running on this home "
            "takes it at once)",
            file=sys.stderr,
        )
        return 0
    try:
        return serve(config)
    except ValueError as exc:
        return _fail(str(exc))
