"""``rollbox env``: the runtime layers of this machine: list them, build a task's, remove what went unused."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from rollbox.judge import runtime_spec
from rollbox.sandbox.runtime import Layer, LayerBuildError, LayerStore, PythonNotFound
from rollbox.tasks import TaskFormatError, load_task

from ._args import non_negative_days
from ._terminal import printable

_DESCRIPTION = """\
A task's [environment] (a Python version, pip requirements, environment/requirements.txt) runs in a runtime
layer: built once with uv into $ROLLBOX_HOME/layers (default ~/.rollbox/layers) under the hash of its resolved
spec, and shared read-only by every sandbox that uses it (python3 there is the layer's). Grading builds a task's
layer on first use; these commands list, build ahead and remove them."""

_EPILOG = """\
Only wheels are installed: building a source distribution would run its code on this host, as root. A layer
records exactly what it holds in requirements.lock beside it.

exit status: 0 on success, 1 when a build failed (its log is printed), 2 on invalid arguments or tasks.

examples:
  rollbox env list
  rollbox env build tasks/numpy-task              build the layer a task grades in (once)
  rollbox env gc --keep-days 7                    remove layers no sandbox used for a week
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``env`` command group."""
    p = commands.add_parser(
        "env",
        help="list, build and remove runtime layers",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="the layers built here, most recently used first")
    listing.add_argument("--json", action="store_true", help="one JSON object a layer")
    listing.set_defaults(run=_list)
    build = verbs.add_parser("build", help="build the layers of tasks (nothing for one already built)")
    build.add_argument("tasks", type=Path, nargs="+", metavar="TASK", help="a task directory")
    build.add_argument("--json", action="store_true", help="one JSON object a task")
    build.set_defaults(run=_build)
    gc = verbs.add_parser("gc", help="remove layers no sandbox holds and none used for a while")
    gc.add_argument(
        "--keep-days", type=non_negative_days, default=30.0, metavar="N", help="keep what was used in N days (30)"
    )
    gc.set_defaults(run=_gc)


def _describe(layer: Layer, store: LayerStore) -> dict[str, Any]:
    size = sum(p.stat().st_size for p in layer.path.rglob("*") if p.is_file() and not p.is_symlink())
    return {
        "key": layer.key,
        "path": str(layer.path),
        "python": layer.python.version,
        "requirements": list(layer.spec.requirements),
        "packages": {name: version for name, version in layer.packages},
        "size_bytes": size,
        "built_at": layer.built_at,
        "last_used": store.last_used(layer.key),
    }


def _ago(at: float) -> str:
    seconds = max(0.0, time.time() - at)
    for unit, length in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f}{unit} ago"
    return "just now"


def _list(args: argparse.Namespace) -> int:
    store = LayerStore()
    described = [_describe(layer, store) for layer in store.layers()]
    if args.json:
        for item in described:
            print(json.dumps(item))
        return 0
    rows = [["KEY", "PYTHON", "PACKAGES", "SIZE", "USED", "REQUIREMENTS"]]
    for item in described:
        size = f"{item['size_bytes'] / 2**20:.1f}M"
        rows.append(
            [
                item["key"][:12],
                item["python"],
                str(len(item["packages"])),
                size,
                _ago(item["last_used"]),
                " ".join(item["requirements"]) or "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if len(rows) == 1:
        print(printable(f"(no layers in {store.root})"), file=sys.stderr)
    return 0


def _build(args: argparse.Namespace) -> int:
    store, failed = LayerStore(), False
    for path in args.tasks:
        try:
            task = load_task(path)
        except TaskFormatError as exc:
            print(printable(f"rollbox env build: invalid task: {exc}"), file=sys.stderr)
            return 2
        spec = runtime_spec(task)
        if spec is None:
            answer: dict[str, Any] = {"task_id": task.id, "layer": None}
            print(json.dumps(answer) if args.json else f"{task.id}: rollbox's own Python, no layer to build")
            continue
        try:
            layer = asyncio.run(store.ensure(spec))
        except (LayerBuildError, PythonNotFound) as exc:
            failed = True
            print(printable(f"rollbox env build: {task.id}: {exc}"), file=sys.stderr)
            continue
        if args.json:
            print(json.dumps({"task_id": task.id, "built": layer.built, **_describe(layer, store)}))
        else:
            what = "built" if layer.built else "already built"
            packages = " ".join(f"{n}=={v}" for n, v in layer.packages)
            print(
                printable(
                    f"{task.id}: {what}: {layer.key[:12]} (Python {layer.python.version}) {layer.path}\n  {packages}"
                )
            )
    return 1 if failed else 0


def _gc(args: argparse.Namespace) -> int:
    removed = LayerStore().gc(keep_days=args.keep_days)
    for key in removed:
        print(printable(f"removed {key}"))
    print(printable(f"{len(removed)} layer{'s' if len(removed) != 1 else ''} removed"), file=sys.stderr)
    return 0
