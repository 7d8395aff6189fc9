#!/usr/bin/env python3
"""What an image root costs a sandbox, side by side with the host's /usr root, in one run.

    python bench/bench_images.py [--megabytes M] [--iterations N] [--rounds R] [--live N] [--repeats R]
                                 [--json PATH]
    python bench/bench_images.py --run-code N [--rounds R] [--concurrency C] [--json PATH]

The image is made once, in a temporary directory, from the host's own files: its programs and Python (what the
tests' image holds, see ``tests/oci_images.py``), then more of the host's /usr until it holds about M MiB
(default 200), in four gzip-compressed layers, as an OCI image layout. Then:

- ``unpack``: importing the layout into a new, empty store (every blob verified, each layer unpacked, the root
  composed) beside ``tar -xzf`` of the same layer blobs into an empty directory (GNU tar, nothing verified), each
  timed from nothing to done, page cache warm for both; then importing the same layout again (every layer is in
  the store: nothing is unpacked);
- ``create+exec+destroy``: ``Sandbox(...)``, ``exec(["true"])``, close, on the host's root and on the image's
  root, the cases alternating round by round, medians; and the first of each, which builds the root every
  sandbox of that root shares (once per process): what a second sandbox on the image pays is the median;
- ``live``: N sandboxes (default 1,000) open at once on each root, the roots alternating R times (``--repeats``,
  default 3): the memory they take each (MemTotal - MemAvailable before and after, divided by N; and the same of
  the kernel's and processes' parts of /proc/meminfo, which the page cache and the rest of the machine disturb
  less), medians.

``--run-code N`` measures ``/run_code`` on an image language instead (python, in the image of the host's programs
the tests use), on a service started in this process on 127.0.0.1: N requests, C at a time (default 4), each a
program that prints one line, requests/s and the median latency, with every request on a fresh sandbox
(``warm_configs=0``: no pool is kept) and served from the warm pool of the image's configuration, the two
alternating round by round (R rounds), medians.

Needs what rollbox's namespaces backend needs (root, cgroups).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import rollbox
from oci_images import host_files_layer, host_image, write_layout
from rollbox.sandbox import Limits, SandboxConfig
from rollbox.sandbox.images import Image, ImageStore
from rollbox.server import ServerConfig
from serving import running

LIMITS = Limits(timeout_s=30, cpu_time_s=10, memory_bytes=128 * 2**20, disk_bytes=16 * 2**20)
#: Host directories that fill the image up to its size, in order.
FILLERS = ("/usr/lib/python3", "/usr/share/perl", "/usr/lib/x86_64-linux-gnu/perl", "/usr/share/doc", "/usr/lib/gcc")


def filler_layers(budget: int, count: int) -> list[bytes]:
    """``count`` tar layers of host files from :data:`FILLERS`, about ``budget`` bytes of files in all."""
    files: list[str] = []
    total = 0
    for top in FILLERS:
        for base, dirs, names in os.walk(top):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(base, name)
                if os.path.isfile(path) and not os.path.islink(path) and total < budget:
                    files.append(path)
                    total += os.path.getsize(path)
    layers = []
    share = -(-len(files) // count)
    for k in range(count):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in files[k * share : (k + 1) * share]:
                tar.add(path, arcname=path.lstrip("/"), recursive=False)
        layers.append(out.getvalue())
    return layers


def make_image(directory: Path, megabytes: int) -> tuple[Path, int]:
    """The layout of about ``megabytes`` MiB (its files), and the bytes its layers' files hold."""
    first = host_files_layer()
    rest = filler_layers(megabytes * 2**20 - len(first), 3)
    layout = write_layout(
        directory / "layout",
        [first, *rest],
        config={"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]},
        compress=True,
    )
    return layout, sum(len(t) for t in [first, *rest])


def _blobs(layout: Path) -> list[Path]:
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs/sha256" / index["manifests"][0]["digest"][7:]).read_text())
    return [layout / "blobs/sha256" / layer["digest"][7:] for layer in manifest["layers"]]


def unpack(layout: Path, scratch: Path) -> dict[str, float]:
    """Import into a new store beside ``tar -xzf`` of the same blobs (each twice, the better time kept)."""
    for blob in _blobs(layout):  # the page cache warm for both
        blob.read_bytes()
    store_s, tar_s = [], []
    for attempt in range(2):
        target = scratch / f"tar-{attempt}"
        target.mkdir()
        began = time.perf_counter()
        for blob in _blobs(layout):
            subprocess.run(["tar", "-xzf", str(blob), "-C", str(target)], check=True)
        tar_s.append(time.perf_counter() - began)
        store = ImageStore(scratch / f"store-{attempt}")
        began = time.perf_counter()
        store.import_layout(layout)
        store_s.append(time.perf_counter() - began)
    began = time.perf_counter()
    ImageStore(scratch / "store-1").import_layout(layout)
    again_s = time.perf_counter() - began
    return {"store_s": min(store_s), "tar_s": min(tar_s), "import_again_s": again_s}


async def _cycle(config: SandboxConfig) -> float:
    began = time.perf_counter()
    async with rollbox.Sandbox(config) as sb:
        result = await sb.exec(["true"])
    if not result.ok:
        raise RuntimeError(f"`true` failed in the sandbox: {result.status.value} {result.stderr!r} {result.error!r}")
    return (time.perf_counter() - began) * 1000


async def cycles(image: Image, *, iterations: int, rounds: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    """create+exec+destroy on each root, interleaved round by round, after a first one on each (which builds the
    root that every sandbox of that root shares, once per process): the firsts' times, and the others'."""
    cases: dict[str, Callable[[], Awaitable[float]]] = {
        "host /usr root": lambda: _cycle(SandboxConfig(limits=LIMITS)),
        "image root": lambda: _cycle(SandboxConfig(limits=LIMITS, image=image)),
    }
    first = {name: await run() for name, run in cases.items()}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for r in range(rounds):
        for name in names[r % 2 :] + names[: r % 2]:
            for _ in range(iterations):
                samples[name].append(await cases[name]())
        print(f"  round {r + 1}/{rounds}", file=sys.stderr)
    return first, samples


#: What a live sandbox's memory is made of (/proc/meminfo), less disturbed than MemAvailable by the page cache and
#: by what else runs on the machine.
_PARTS = ("Slab", "PageTables", "KernelStack", "AnonPages", "Shmem", "Percpu")


def _meminfo() -> dict[str, int]:
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        values[name] = int(rest.split()[0]) * 1024
    return values


def _used() -> tuple[int, int]:
    """(MemTotal - MemAvailable, the sum of :data:`_PARTS`), in bytes."""
    info = _meminfo()
    return info["MemTotal"] - info["MemAvailable"], sum(info.get(part, 0) for part in _PARTS)


async def live(config: SandboxConfig, count: int) -> dict[str, float]:
    """``count`` sandboxes of ``config`` open at once: memory each (MemAvailable, and its kernel and process parts),
    and how long opening took."""
    before = _used()
    opened: list[rollbox.Sandbox] = []
    began = time.perf_counter()
    try:
        for _ in range(0, count, 8):  # eight starts in flight, as bench_live.py does
            batch = [rollbox.Sandbox(config) for _ in range(min(8, count - len(opened)))]
            opened += await asyncio.gather(*(sb.__aenter__() for sb in batch))
        opening_s = time.perf_counter() - began
        probe = await opened[-1].exec(["true"])
        if not probe.ok:
            raise RuntimeError(f"the last sandbox does not run `true`: {probe}")
        await asyncio.sleep(2)  # settled: what closing the starts' helpers frees is freed
        after = _used()
    finally:
        await asyncio.gather(*(sb.close() for sb in opened), return_exceptions=True)
    return {
        "sandboxes": count,
        "opening_s": opening_s,
        "memory_bytes_per_sandbox": (after[0] - before[0]) / count,
        "parts_bytes_per_sandbox": (after[1] - before[1]) / count,
    }


async def lives(image: Image, count: int, repeats: int) -> dict[str, list[dict[str, float]]]:
    """:func:`live` on each root, alternating, ``repeats`` times each."""
    found: dict[str, list[dict[str, float]]] = {"host": [], "image": []}
    for _ in range(repeats):
        found["host"].append(await live(SandboxConfig(limits=LIMITS), count))
        found["image"].append(await live(SandboxConfig(limits=LIMITS, image=image), count))
    return found


async def _requests(url: str, count: int, concurrency: int) -> tuple[float, float]:
    """(requests/s, median latency in ms) of ``count`` python requests to ``/run_code`` at ``url``."""
    request = {"code": "print(sum(range(10)))", "language": "python"}
    latencies: list[float] = []
    left = iter(range(count))
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:

        async def client() -> None:
            for _ in left:
                start = time.perf_counter()
                body = (await http.post("/run_code", json=request)).json()
                latencies.append(time.perf_counter() - start)
                if body["status"] != "Success":
                    raise SystemExit(f"/run_code did not succeed: {body}")

        await client()  # one first: the pool (when kept) is made by the first request, not counted
        latencies.clear()
        left = iter(range(count))
        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return count / wall, statistics.median(latencies) * 1000


def run_code(count: int, rounds: int, concurrency: int) -> dict[str, dict[str, float]]:
    """``/run_code`` on an image language, fresh sandboxes against the warm pool (see the module's docstring)."""
    image = host_image()
    found: dict[str, list[tuple[float, float]]] = {"fresh sandbox": [], "warm pool": []}
    for _ in range(rounds):
        for name, kept in (("fresh sandbox", 0), ("warm pool", 1)):
            config = ServerConfig(language_images=image.refs[0], pool_size=concurrency, warm_configs=kept)
            with running(config) as server:
                found[name].append(asyncio.run(_requests(server.url, count, concurrency)))
    return {
        name: {
            "requests_per_s": statistics.median(r for r, _ in runs),
            "latency_ms": statistics.median(latency for _, latency in runs),
        }
        for name, runs in found.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--live", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--run-code", type=int, default=0, metavar="N")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    if args.run_code:
        home = Path(tempfile.mkdtemp(prefix="rollbox-bench-run-code-"))
        os.environ["ROLLBOX_HOME"] = str(home)
        try:
            found = run_code(args.run_code, args.rounds, args.concurrency)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        for name, figures in found.items():
            print(
                f"/run_code python on an image, {name}: {figures['requests_per_s']:.1f} requests/s, "
                f"median latency {figures['latency_ms']:.0f} ms ({args.concurrency} at a time, median of "
                f"{args.rounds} rounds of {args.run_code})"
            )
        if args.json:
            args.json.write_text(json.dumps(found, indent=2) + "\n")
        return
    scratch = Path(tempfile.mkdtemp(prefix="rollbox-bench-images-"))
    report: dict[str, object] = {}
    try:
        print(f"making a {args.megabytes} MiB image from the host's files ...", file=sys.stderr)
        layout, size = make_image(scratch, args.megabytes)
        report["image_bytes"] = size
        report["unpack"] = times = unpack(layout, scratch)
        print(
            f"unpack ({size / 2**20:.0f} MiB, {len(_blobs(layout))} layers): store {times['store_s']:.2f} s, "
            f"tar -xzf {times['tar_s']:.2f} s ({times['store_s'] / times['tar_s']:.2f}x); "
            f"the same image again {times['import_again_s'] * 1000:.0f} ms"
        )
        (image,) = ImageStore(scratch / "store-1").list()
        first, samples = asyncio.run(cycles(image, iterations=args.iterations, rounds=args.rounds))
        medians = {name: statistics.median(values) for name, values in samples.items()}
        report["create_exec_destroy_ms"] = medians
        report["first_sandbox_ms"] = first
        host, on_image = medians["host /usr root"], medians["image root"]
        print(f"create+exec+destroy: host /usr {host:.1f} ms, image {on_image:.1f} ms ({on_image / host:.2f}x)")
        print(
            f"the first sandbox of the process on each root (builds its shared root): host /usr "
            f"{first['host /usr root']:.1f} ms, image {first['image root']:.1f} ms; every later one on the image "
            "pays no unpack (the median above)"
        )
        if args.live:
            report["live"] = found = asyncio.run(lives(image, args.live, args.repeats))
            each = {
                root: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for root, runs in found.items()
            }
            for key, what in (("memory_bytes_per_sandbox", "MemAvailable"), ("parts_bytes_per_sandbox", "parts")):
                a, b = each["host"][key], each["image"][key]
                print(
                    f"{args.live} live sandboxes, memory each ({what}, median of {args.repeats}): host /usr "
                    f"{a / 2**20:.2f} MiB, image {b / 2**20:.2f} MiB ({b / a:.2f}x)"
                )
            print(
                f"opened in {each['host']['opening_s']:.1f} s (host /usr), {each['image']['opening_s']:.1f} s (image)"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
