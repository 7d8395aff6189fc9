"""Runtime layers: built once by uv under the key of their resolved spec, shared read-only, never half-used.

Every build here installs from a local directory of wheels made by the tests (a uv.toml with ``no-index`` and
``find-links``), so that these tests need no network; ``test_runtime_judge.py`` builds one from the real index.
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from conftest import TIME_SCALE
from rollbox.sandbox import Limits, Sandbox, SandboxError
from rollbox.sandbox.images import ImageError, ImageStore
from rollbox.sandbox.runtime import Layer, LayerBuildError, LayerStore, PythonNotFound, RuntimeSpec, find_python


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(directory: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel of ``files`` (paths in site-packages to their text), as an index would serve it."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    members = {
        **files,
        f"{dist}/METADATA": metadata,
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: rollbox-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},{_record_hash(text.encode())},{len(text.encode())}\n" for path, text in members.items())
    members[f"{dist}/RECORD"] = record + f"{dist}/RECORD,,\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in members.items():
            archive.writestr(path, text)
    return wheel


def make_sdist(directory: Path, name: str, version: str, marker: Path) -> Path:
    """A source distribution whose in-tree build backend (no dependency to fetch) writes ``marker`` on the host
    when it runs, then builds a wheel of one module."""
    module = name.replace("-", "_")
    backend = textwrap.dedent(f"""
        import base64, hashlib, pathlib, zipfile
        def get_requires_for_build_wheel(config_settings=None):
            return []
        def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
            pathlib.Path({str(marker)!r}).write_text("the build backend ran here")
            dist = "{module}-{version}.dist-info"
            members = {{"{module}.py": "VALUE = 'built from source'\\n",
                       dist + "/METADATA": "Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n",
                       dist + "/WHEEL": "Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}}
            def digest(text):
                raw = hashlib.sha256(text.encode()).digest()
                return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
            record = "".join(f"{{p}},{{digest(t)}},{{len(t.encode())}}\\n" for p, t in members.items())
            members[dist + "/RECORD"] = record + dist + "/RECORD,,\\n"
            filename = "{module}-{version}-py3-none-any.whl"
            with zipfile.ZipFile(pathlib.Path(wheel_directory) / filename, "w") as archive:
                for path, text in members.items():
                    archive.writestr(path, text)
            return filename
    """)
    pyproject = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    pyproject += f'[project]\nname = "{name}"\nversion = "{version}"\n'
    pkg_info = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    directory.mkdir(parents=True, exist_ok=True)
    sdist = directory / f"{name}-{version}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for path, text in {"pyproject.toml": pyproject, "backend.py": backend, "PKG-INFO": pkg_info}.items():
            info = tarfile.TarInfo(f"{name}-{version}/{path}")
            info.size = len(text.encode())
            archive.addfile(info, io.BytesIO(text.encode()))
    return sdist


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local package index (a directory of wheels), the only one uv asks (a uv.toml with no-index), and a
    private ROLLBOX_HOME."""
    directory = tmp_path / "wheels"
    make_wheel(directory, "rbx-greet", "1.0", {"rbx_greet/__init__.py": "WORD = 'hello one'\n"})
    make_wheel(directory, "rbx-greet", "2.0", {"rbx_greet/__init__.py": "WORD = 'hello two'\n"})
    make_wheel(directory, "rbx-app", "0.1", {"rbx_app.py": "from rbx_greet import WORD\n"}, requires=("rbx-greet>=2",))
    config = tmp_path / "uv.toml"
    config.write_text(f"[pip]\nno-index = true\nfind-links = [{str(directory)!r}]\n")
    monkeypatch.setenv("UV_CONFIG_FILE", str(config))
    monkeypatch.setenv("ROLLBOX_HOME", str(tmp_path / "home"))
    for variable in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_NO_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    return directory


LIMITS = Limits(timeout_s=30 * TIME_SCALE, cpu_time_s=15 * TIME_SCALE)


async def _python(layer: Layer | None, code: str) -> tuple[str, str]:
    async with Sandbox(runtime=layer, limits=LIMITS) as sb:
        result = await sb.exec(["python3", "-c", code])
        listing = await sb.exec(["sh", "-c", "ls -A /tmp /workspace /dev/shm"])
    assert result.ok, result
    return result.stdout_text, listing.stdout_text


def test_a_layer_is_built_once_keyed_by_its_resolved_spec_and_found_again(wheels: Path) -> None:
    store = LayerStore()

    async def main() -> tuple[Layer, Layer, str, str]:
        first = await store.ensure(RuntimeSpec(requirements=("rbx-app", "RBX_Greet")))
        again = await store.ensure(RuntimeSpec(requirements=("rbx_greet", "rbx-app", "rbx-app")))  # the same spec
        out, listing = await _python(first, "import sys, rbx_app; print(rbx_app.WORD, sys.executable, sys.prefix)")
        return first, again, out, listing

    first, again, out, listing = asyncio.run(main())
    assert first.built and not again.built and first.key == again.key and first.path == again.path
    assert first.path == Path(os.environ["ROLLBOX_HOME"], "layers", first.key)
    assert dict(first.packages) == {"rbx-app": "0.1", "rbx-greet": "2.0"}
    assert first.lock_file.read_text().split() == ["rbx-app==0.1", "rbx-greet==2.0"]
    assert out.split() == ["hello", "two", "/opt/rollbox/env/bin/python3", "/opt/rollbox/env"]
    assert listing.split() == ["/dev/shm:", "/tmp:", "/workspace:"]  # nothing of the runtime in them
    assert [layer.key for layer in store.layers()] == [first.key]
    assert store.get(first.key[:12]) == first
    # A different spec is a different layer: pinned, the older version.
    pinned = asyncio.run(store.ensure(RuntimeSpec(requirements=("rbx-greet==1.0",))))
    assert pinned.key != first.key and dict(pinned.packages) == {"rbx-greet": "1.0"}
    assert asyncio.run(_python(pinned, "import rbx_greet; print(rbx_greet.WORD)"))[0] == "hello one\n"


def test_a_sandbox_cannot_change_its_layer(wheels: Path) -> None:
    layer = asyncio.run(LayerStore().ensure(RuntimeSpec(requirements=("rbx-greet==1.0",))))
    site = f"/opt/rollbox/env/{layer.python.site_packages}"

    async def main() -> str:
        async with Sandbox(runtime=layer, limits=LIMITS) as sb:
            attempt = await sb.exec(
                ["sh", "-c", f"echo hacked > {site}/rbx_greet/__init__.py; touch /opt/rollbox/env/x; echo $?"]
            )
            return attempt.stdout_text + attempt.stderr_text

    said = asyncio.run(main())
    assert "Read-only file system" in said, said
    assert (layer.env / layer.python.site_packages / "rbx_greet" / "__init__.py").read_text() == "WORD = 'hello one'\n"


_CONCURRENT = """
import asyncio, json, sys, time
from pathlib import Path
from rollbox.sandbox.runtime import LayerStore, RuntimeSpec
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
layer = asyncio.run(LayerStore().ensure(RuntimeSpec(requirements=("rbx-app",))))
print(json.dumps({"key": layer.key, "built": layer.built, "packages": layer.packages}))
"""


def test_two_processes_asking_for_one_layer_at_once_build_it_once(wheels: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    processes = [
        subprocess.Popen([sys.executable, "-c", _CONCURRENT, str(go)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    time.sleep(0.5)  # both started and waiting
    go.touch()
    answers = [json.loads(p.communicate(timeout=120)[0]) for p in processes]
    assert all(p.returncode == 0 for p in processes)
    assert sorted(a["built"] for a in answers) == [False, True]
    assert answers[0]["key"] == answers[1]["key"] and answers[0]["packages"] == answers[1]["packages"]
    layers = Path(os.environ["ROLLBOX_HOME"], "layers")
    assert sorted(p.name for p in layers.iterdir() if p.is_dir()) == [answers[0]["key"]]  # no leftover build


def test_a_caller_waiting_out_a_build_finds_the_layer_while_sandboxes_hold_it(wheels: Path) -> None:
    """Waiting out a build must not mean waiting for the exclusive lock: the sandboxes that start using the layer
    as soon as it is built hold its shared lock for as long as they live."""
    store = LayerStore()
    spec = RuntimeSpec(requirements=("rbx-greet==1.0",))
    layer = asyncio.run(store.ensure(spec))

    async def main() -> Layer:
        builder = os.open(layer.path.parent / f"{layer.key}.lock", os.O_RDWR)
        fcntl.flock(builder, fcntl.LOCK_EX)  # as a build under way holds it
        waiter = asyncio.create_task(store.ensure(spec))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        os.close(builder)  # the build is done, and at once a sandbox holds the layer
        user = layer.hold()
        try:
            return await asyncio.wait_for(waiter, 10)
        finally:
            os.close(user)

    found = asyncio.run(main())
    assert found.key == layer.key and not found.built


def test_a_failed_build_is_reported_with_its_log_and_leaves_nothing_half_used(wheels: Path) -> None:
    store = LayerStore()
    spec = RuntimeSpec(requirements=("rbx-greet", "rollbox-no-such-package==1.0"))
    with pytest.raises(LayerBuildError) as caught:
        asyncio.run(store.ensure(spec))
    error = caught.value
    assert "rollbox-no-such-package" in str(error) and "uv pip install failed" in str(error)
    assert error.log_path is not None and error.log_path.read_text() == error.log
    assert "rollbox-no-such-package" in error.log
    assert store.layers() == []
    layers = Path(os.environ["ROLLBOX_HOME"], "layers")
    assert [p.name for p in layers.iterdir() if p.is_dir() and not p.name.startswith(".failed")] == []
    # The index gets the package: the next request builds it (the failure is not remembered as a layer).
    make_wheel(wheels, "rollbox-no-such-package", "1.0", {"rollbox_no_such_package.py": ""})
    assert asyncio.run(store.ensure(spec)).built
    assert not error.log_path.exists()


def test_a_layer_whose_layer_json_is_unreadable_is_built_again_in_its_place(wheels: Path) -> None:
    store = LayerStore()
    spec = RuntimeSpec(requirements=("rbx-greet",))
    layer = asyncio.run(store.ensure(spec))
    (layer.path / "layer.json").write_text("")  # what a power loss before the data reached the disk leaves
    assert store.get(layer.key) is None
    rebuilt, found = (asyncio.run(store.ensure(spec)) for _ in range(2))
    assert rebuilt.built and not found.built and found.key == layer.key and Layer.read(layer.path) == found
    assert asyncio.run(_python(found, "import rbx_greet; print(rbx_greet.WORD)"))[0] == "hello two\n"
    assert not list(store.root.glob(".build-*")) and not list(store.root.glob(".trash-*"))


def test_a_full_disk_under_the_store_is_a_layer_build_error_naming_the_store(wheels: Path, small_disk: Path) -> None:
    store = LayerStore(small_disk / "layers")
    (small_disk / "filler").write_bytes(b"\0" * shutil.disk_usage(small_disk).free)
    with pytest.raises(LayerBuildError) as caught:
        asyncio.run(store.ensure(RuntimeSpec(requirements=("rbx-greet",))))
    assert "No space left on device" in str(caught.value) and store.layers() == []
    assert f"free space under {small_disk / 'layers'} ('rollbox env gc')" in str(caught.value), caught.value


def test_a_store_error_other_than_a_full_disk_gives_no_advice_to_free_space(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(LayerBuildError) as caught:
        asyncio.run(LayerStore(tmp_path / "file" / "layers").ensure(RuntimeSpec(requirements=("rbx-greet",))))
    assert "Not a directory" in str(caught.value) and "free space" not in str(caught.value), caught.value
    with pytest.raises(ImageError) as refused:
        ImageStore(tmp_path / "file" / "images").import_layout(tmp_path)
    assert "Not a directory" in str(refused.value) and "free space" not in str(refused.value), refused.value


def test_source_distributions_are_refused_unless_allowed_and_their_build_code_never_runs(
    wheels: Path, tmp_path: Path
) -> None:
    # Building an sdist runs its own code on the host, as root: by default no such code runs at all.
    marker = tmp_path / "backend-ran"
    make_sdist(wheels, "rbx-sourceonly", "1.0", marker)
    store = LayerStore()
    with pytest.raises(LayerBuildError, match="rbx-sourceonly"):
        asyncio.run(store.ensure(RuntimeSpec(requirements=("rbx-sourceonly",))))
    assert not marker.exists()
    allowed = asyncio.run(store.ensure(RuntimeSpec(requirements=("rbx-sourceonly",), allow_sdists=True)))
    assert marker.exists() and dict(allowed.packages) == {"rbx-sourceonly": "1.0"}
    assert (
        asyncio.run(_python(allowed, "import rbx_sourceonly; print(rbx_sourceonly.VALUE)"))[0] == "built from source\n"
    )


def test_gc_removes_what_went_unused_and_never_a_layer_a_sandbox_holds(wheels: Path) -> None:
    store = LayerStore()
    held = asyncio.run(store.ensure(RuntimeSpec(requirements=("rbx-greet==1.0",))))
    idle = asyncio.run(store.ensure(RuntimeSpec(requirements=("rbx-greet==2.0",))))
    fresh = asyncio.run(store.ensure(RuntimeSpec(requirements=("rbx-app",))))
    month_ago = time.time() - 31 * 86_400
    for layer in (held, idle):
        os.utime(store.root / f"{layer.key}.lock", (month_ago, month_ago))
    leftover = store.root / f".build-{'0' * 64}-dead"  # a builder that died
    leftover.mkdir()
    os.utime(leftover, (month_ago, month_ago))

    async def main() -> tuple[list[str], str]:
        async with Sandbox(runtime=held, limits=LIMITS) as sb:
            removed = store.gc(keep_days=30)
            result = await sb.exec(["python3", "-c", "import rbx_greet; print(rbx_greet.WORD)"])
        return removed, result.stdout_text

    removed, out = asyncio.run(main())
    assert removed == [idle.key] and out == "hello one\n"
    assert not idle.path.exists() and held.path.exists() and fresh.path.exists() and not leftover.exists()
    assert store.gc(keep_days=30) == [held.key]  # closed now
    assert [layer.key for layer in store.layers()] == [fresh.key]
    with pytest.raises(SandboxError) as caught:
        asyncio.run(_python(held, "pass"))
    assert "build it again" in str(caught.value)
    assert asyncio.run(store.ensure(held.spec)).built  # and so it is
    with pytest.raises(ValueError, match="keep_days"):
        store.gc(keep_days=-1)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"requirements": ("-r other.txt",)}, "pip option"),
        ({"requirements": ("--index-url=http://x",)}, "pip option"),
        ({"requirements": ("not a requirement!",)}, "not a valid requirement"),
        ({"requirements": ("",)}, "expected a requirement line"),
        ({"requirements": "attrs"}, "sequence of lines"),
    ],
)
def test_a_malformed_spec_is_refused_on_construction(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RuntimeSpec(**spec)  # type: ignore[arg-type]


def test_an_interpreter_that_is_not_installed_is_refused_with_what_to_do(wheels: Path) -> None:
    with pytest.raises(ValueError, match=r"3\.12"):
        find_python("python3.12")
    with pytest.raises(PythonNotFound, match=r"no Python 3\.99 .*ROLLBOX_PYTHONS"):
        asyncio.run(LayerStore().ensure(RuntimeSpec(python="3.99")))
