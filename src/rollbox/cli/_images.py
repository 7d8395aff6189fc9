"""``rollbox images``: the image store of this machine: pull, import, build, list, inspect, remove, gc."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from rollbox.sandbox.images import Image, ImageError, ImageStore
from rollbox.sandbox.images._build import build_image
from rollbox.sandbox.images._recipe import load_recipe, recipe_names
from rollbox.sandbox.images._registry import MAX_BLOB_BYTES, Credentials, PullProgress, pull_image

from ._args import byte_size
from ._terminal import printable

_DESCRIPTION = """\
A sandbox runs on an image's root file system when a task names one ([environment] image = "REF") or
`rollbox exec --image REF` does. Images live in $ROLLBOX_HOME/images (default ~/.rollbox/images), verified
against their digests, unpacked once and shared; records name an image by its digest, never its tag."""

_EPILOG = """\
References are read as Docker reads them: NAME[:TAG] is Docker Hub's (library/NAME for one-part names),
HOST[:PORT]/NAME[:TAG] another registry's, NAME@sha256:HEX a pinned manifest. Loopback registries are spoken
to over plain HTTP, others over HTTPS (--plain-http for one without TLS). Credentials: --username with
--password-stdin, else ROLLBOX_REGISTRY_USER and ROLLBOX_REGISTRY_PASSWORD, else ~/.docker/config.json.

exit status: 0 on success, 1 when the image could not be pulled, imported, built or found (one line says why),
2 on invalid arguments.

examples:
  rollbox images pull debian:bookworm-slim
  rollbox images pull 127.0.0.1:5000/team/tools:1 --username me --password-stdin < token.txt
  rollbox images import saved.tar --ref tools:1      a docker-save or OCI archive, or an OCI layout directory
  rollbox images build java                          a shipped recipe (or a recipe.toml) built with mmdebstrap
  rollbox images list --json
  rollbox images inspect tools:1
  rollbox images rm tools:1 && rollbox images gc     forget an image, then free what nothing uses
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``images`` command group."""
    p = commands.add_parser(
        "images",
        help="pull, import, build, list and remove the images sandboxes run on",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    pull = verbs.add_parser("pull", help="download an image from a registry into the store")
    pull.add_argument("reference", metavar="REF", help="NAME[:TAG], HOST[:PORT]/NAME[:TAG] or NAME@sha256:HEX")
    pull.add_argument("--platform", metavar="OS/ARCH", help="from a manifest list (default: this machine's)")
    pull.add_argument("--username", help="for the registry, with --password-stdin")
    pull.add_argument("--password-stdin", action="store_true", help="read the password (or token) from stdin")
    pull.add_argument(
        "--plain-http", action="store_true", default=None, help="speak HTTP, not HTTPS (loopback registries always are)"
    )
    pull.add_argument(
        "--max-blob-size",
        type=byte_size,
        default=MAX_BLOB_BYTES,
        metavar="SIZE",
        help=f"refuse a blob the manifest states larger than this (default {MAX_BLOB_BYTES >> 30}G)",
    )
    pull.add_argument("--json", action="store_true", help="print the image as a JSON object")
    pull.set_defaults(run=_pull)
    imp = verbs.add_parser("import", help="import an OCI layout directory, a docker-save or an OCI archive")
    imp.add_argument("path", type=Path, metavar="FILE|DIR", help="an archive (.tar) or an OCI image layout directory")
    imp.add_argument("--ref", metavar="NAME:TAG", help="the reference to know it by (default: the one it names)")
    imp.add_argument("--json", action="store_true", help="print the image as a JSON object")
    imp.set_defaults(run=_import)
    build = verbs.add_parser("build", help="build an image from a Debian recipe (mmdebstrap), reproducibly")
    build.add_argument("recipe", metavar="RECIPE", help=f"a shipped recipe ({', '.join(recipe_names())}) or a .toml")
    build.add_argument("--json", action="store_true", help="print the image as a JSON object")
    build.set_defaults(run=_build)
    listing = verbs.add_parser("list", help="the images in the store")
    listing.add_argument("--json", action="store_true", help="one JSON object an image")
    listing.set_defaults(run=_list)
    inspect = verbs.add_parser("inspect", help="one image: digest, references, platform, configuration, root")
    inspect.add_argument("reference", metavar="REF", help="a reference, a digest or a digest's prefix")
    inspect.add_argument("--json", action="store_true", help="as a JSON object")
    inspect.set_defaults(run=_inspect)
    rm = verbs.add_parser("rm", help="forget images (their files go at the next gc)")
    rm.add_argument("references", nargs="+", metavar="REF", help="a reference, a digest or a digest's prefix")
    rm.set_defaults(run=_remove)
    gc = verbs.add_parser("gc", help="free the layers and roots no image names and no sandbox holds")
    gc.add_argument("--json", action="store_true", help='print {"freed_bytes": N}')
    gc.set_defaults(run=_gc)


def describe(image: Image) -> dict[str, Any]:
    """``image`` as ``--json`` prints it."""
    config = image.config
    return {
        "digest": image.digest,
        "refs": list(image.refs),
        "platform": image.platform,
        "size_bytes": image.size_bytes,
        "root": str(image.root),
        "config": {
            "env": [f"{name}={value}" for name, value in config.env],
            "working_dir": config.working_dir,
            "user": config.user,
            "entrypoint": list(config.entrypoint),
            "cmd": list(config.cmd),
        },
    }


def _fail(args: argparse.Namespace, exc: ImageError) -> int:
    line = " ".join(str(exc).split())  # one line, whatever a lower layer's message (tarfile's has several)
    print(printable(f"rollbox images {args.verb}: {line}"), file=sys.stderr)
    return 1


def _done(args: argparse.Namespace, image: Image, what: str) -> int:
    if args.json:
        print(json.dumps(describe(image)))
    else:
        print(
            printable(
                f"{what} {image.digest} as {', '.join(image.refs) or '(no reference)'} ({_size(image.size_bytes)})"
            )
        )
    return 0


def _size(size_bytes: int) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f}{unit}"
    return f"{size_bytes}B"


class _Bar:
    """A progress line on stderr, redrawn in place on a terminal, at most a few times a second."""

    def __init__(self, stream: TextIO, reference: str) -> None:
        self.stream, self.reference = stream, reference
        self.tty = stream.isatty()
        self.start = self.last = time.monotonic()

    def __call__(self, progress: PullProgress) -> None:
        now = time.monotonic()
        if not self.tty or (now - self.last < 0.2 and progress.done_bytes < progress.total_bytes):
            return
        self.last = now
        fraction = progress.done_bytes / progress.total_bytes if progress.total_bytes else 1.0
        bar = "#" * int(30 * fraction)
        self.stream.write(
            f"\r\033[Kpulling {self.reference} [{bar:<30}] {_size(progress.done_bytes)}/{_size(progress.total_bytes)}"
            f"  {now - self.start:.1f} s"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()


def _pull(args: argparse.Namespace) -> int:
    credentials = None
    if args.password_stdin:
        if not args.username:
            print("rollbox images pull: --password-stdin needs --username", file=sys.stderr)
            return 2
        credentials = Credentials(args.username, sys.stdin.readline().rstrip("\r\n"))
    elif args.username:
        print("rollbox images pull: give the password of --username on stdin with --password-stdin", file=sys.stderr)
        return 2
    bar = _Bar(sys.stderr, args.reference)
    try:
        image, result = pull_image(
            ImageStore(),
            args.reference,
            credentials=credentials,
            platform=args.platform,
            plain_http=args.plain_http,
            on_progress=bar,
            max_blob_bytes=args.max_blob_size,
        )
    except ImageError as exc:
        bar.close()
        return _fail(args, exc)
    bar.close()
    fetched = f"{_size(result.downloaded_bytes)} downloaded" + (
        f", {_size(result.reused_bytes)} already here" if result.reused_bytes else ""
    )
    if not args.json:
        print(fetched, file=sys.stderr)
    return _done(args, image, "pulled")


def _import(args: argparse.Namespace) -> int:
    store = ImageStore()
    try:
        if args.path.is_dir():
            image = store.import_layout(args.path, ref=args.ref)
        else:
            image = store.import_archive(args.path, ref=args.ref)
    except ImageError as exc:
        return _fail(args, exc)
    return _done(args, image, "imported")


def _build(args: argparse.Namespace) -> int:
    try:
        image = build_image(load_recipe(args.recipe), ImageStore())
    except ImageError as exc:  # BuildError is one
        return _fail(args, exc)
    return _done(args, image, "built")


def _list(args: argparse.Namespace) -> int:
    store = ImageStore()
    images = store.list()
    if args.json:
        for image in images:
            print(json.dumps(describe(image)))
        return 0
    rows = [["DIGEST", "PLATFORM", "SIZE", "REFERENCES"]]
    rows += [[image.short, image.platform, _size(image.size_bytes), " ".join(image.refs) or "-"] for image in images]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if not images:
        print(printable(f"(no images in {store.home}: rollbox images pull, import or build one)"), file=sys.stderr)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    try:
        image = ImageStore().resolve(args.reference)
    except ImageError as exc:
        return _fail(args, exc)
    described = describe(image)
    if args.json:
        print(json.dumps(described, indent=2))
        return 0
    config = described.pop("config")
    for key, value in [*described.items(), *config.items()]:
        shown = " ".join(value) if isinstance(value, list) else value
        print(printable(f"{key + ':':<12} {shown if shown not in (None, '') else '-'}"))
    return 0


def _remove(args: argparse.Namespace) -> int:
    store = ImageStore()
    for reference in args.references:
        try:
            store.remove(reference)
        except ImageError as exc:
            return _fail(args, exc)
        print(printable(f"removed {reference}"))
    return 0


def _gc(args: argparse.Namespace) -> int:
    freed = ImageStore().gc()
    print(json.dumps({"freed_bytes": freed}) if args.json else f"{_size(freed)} freed")
    return 0
