"""``rollbox serve``: the HTTP service (and its API keys)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_HELP = """\
Serve rollbox over HTTP: sandboxes, grading, SandboxFusion's /run_code and /submit, /metrics, the dashboard
(/dashboard) and the OpenAPI spec (/openapi.json). Auth (API keys per tenant) is on whenever --host is not a
loopback address; make keys with --add-key.

examples:
  rollbox serve                                      127.0.0.1:8080, no auth
  rollbox serve --add-key team-a                     print a new API key for tenant team-a, and exit
  rollbox serve --host 0.0.0.0 --tasks-dir tasks/    auth on; serve the tasks under tasks/
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
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (the sandboxes API needs 1)")
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument("--auth", dest="auth", action="store_true", default=None, help="require API keys")
    auth.add_argument("--no-auth", dest="auth", action="store_false", help="require none (even off loopback)")
    parser.add_argument("--home", type=Path, help="state directory (default $ROLLBOX_HOME or ~/.rollbox)")
    parser.add_argument("--tasks-dir", type=Path, help="a directory of task directories to serve")
    parser.add_argument("--archive", help="fsspec URL of the archive (default HOME/archive; '' turns it off)")
    parser.add_argument("--run", dest="run_id", help="the run id of this service's work (default serve-DATE-TIME)")
    parser.add_argument("--idle-timeout", type=float, help="seconds before an unused sandbox is closed (300)")
    parser.add_argument("--body-timeout", type=float, help="seconds a request's body may take to arrive, else 408 (60)")
    parser.add_argument("--pool-size", type=int, help="warm sandboxes per configuration (twice the CPUs)")
    parser.add_argument("--add-key", metavar="TENANT", help="print a new API key for TENANT, and exit")
    parser.add_argument("--admin", action="store_true", help="with --add-key: the tenant sees every tenant's figures")
    parser.add_argument("--revoke", metavar="TENANT", help="revoke every key of TENANT, and exit")
    parser.add_argument("--alert-rules", type=Path, metavar="FILE", help="write Prometheus alert rules, and exit")
    parser.set_defaults(run=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        from rollbox.server import ServerConfig, TenantStore, serve
        from rollbox.telemetry import prometheus_rules
    except ImportError as exc:
        print(f"rollbox serve needs the server extra: pip install 'rollbox[server]' ({exc})", file=sys.stderr)
        return 2
    settings: dict[str, object] = {"host": args.host, "port": args.port, "workers": args.workers, "auth": args.auth}
    for name, value in (
        ("home", args.home),
        ("tasks_dir", args.tasks_dir),
        ("archive_url", args.archive),
        ("run", args.run_id),
        ("idle_timeout_s", args.idle_timeout),
        ("pool_size", args.pool_size),
        ("body_timeout_s", args.body_timeout),
    ):
        if value is not None:
            settings[name] = value
    config = ServerConfig(**settings)  # type: ignore[arg-type]
    if args.alert_rules is not None:
        args.alert_rules.write_text(prometheus_rules())
        print(f"wrote {args.alert_rules}")
        return 0
    if args.add_key or args.revoke:
        store = TenantStore(config.tenants_path)
        if args.revoke:
            print(f"revoked {store.revoke(args.revoke)} keys of {args.revoke!r}")
            return 0
        try:
            print(store.add_key(args.add_key, **({"admin": True} if args.admin else {})))
        except ValueError as exc:
            print(f"rollbox serve: {exc}", file=sys.stderr)
            return 2
        print(f"(stored hashed in {config.tenants_path}; this key is shown only now)", file=sys.stderr)
        return 0
    try:
        serve(config)
    except ValueError as exc:
        print(f"rollbox serve: {exc}", file=sys.stderr)
        return 2
    return 0
