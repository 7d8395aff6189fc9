"""Pulling images from a real registry (Debian's docker-registry) on 127.0.0.1: anonymous and token auth, manifest
lists, resumed downloads, corrupt blobs refused; what is pulled is imported by the store and checked by skopeo."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import gzip
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oci_images import ARCH, OTHER_ARCH, Entry, tar_layer, write_layout
from registry_server import PASSWORD, USER, Registry, free_port, registry, sha256
from rollbox.sandbox.images import Credentials, ImageError, ImageStore, PullProgress, pull, pull_image
from rollbox.sandbox.images._layout import this_platform
from rollbox.sandbox.images._reference import Reference, parse_reference
from rollbox.sandbox.images._registry import credentials_for, download_dir

pytestmark = pytest.mark.timeout(300)


def test_pulling_is_public_api_that_costs_no_import_of_its_own() -> None:
    from rollbox.sandbox import images
    from rollbox.sandbox.images import _registry

    assert {"pull", "pull_image", "Credentials", "PullProgress", "PullResult"} <= set(images.__all__)
    assert images.pull_image is _registry.pull_image and images.Credentials is _registry.Credentials
    assert pull is _registry.pull and pull_image is _registry.pull_image
    # The HTTP client is loaded by a pull, not by every process that imports the sandbox.
    fresh = subprocess.run(
        [sys.executable, "-c", "import sys, rollbox.sandbox.images; print('httpx' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert fresh.stdout == "False\n"


@pytest.fixture(scope="module")
def open_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registry(tmp_path_factory.mktemp("open-registry")) as running:
        yield running


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registry(tmp_path_factory.mktemp("token-registry"), auth=True) as running:
        yield running


@pytest.fixture(autouse=True)
def _no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credentials but the ones a test gives (not the user's ~/.docker)."""
    monkeypatch.delenv("ROLLBOX_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ROLLBOX_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))


def small_layout(path: Path, text: str, *, ref: str = "1") -> Path:
    return write_layout(path, [tar_layer([Entry("etc", "dir", mode=0o755), Entry("etc/hello", data=text.encode())])],
                        config={"Env": ["GREETING=" + text]}, ref=ref)  # fmt: skip


def test_a_pulled_image_is_a_layout_skopeo_reads_and_the_store_imports(open_registry: Registry, tmp_path: Path) -> None:
    open_registry.push(small_layout(tmp_path / "src", "from the registry"), "tests/hello:1")
    progress: list[PullProgress] = []
    result = pull(f"{open_registry.host}/tests/hello:1", tmp_path / "pulled", on_progress=progress.append)
    assert result.reused_bytes == 0 and result.downloaded_bytes == progress[-1].total_bytes == progress[-1].done_bytes
    inspected = json.loads(subprocess.run(["skopeo", "inspect", f"oci:{result.layout}"], check=True,
                                          capture_output=True, text=True).stdout)  # fmt: skip
    assert inspected["Digest"] == result.digest and "GREETING=from the registry" in inspected["Env"]
    image = ImageStore(tmp_path / "store").import_layout(result.layout, ref=result.reference)
    assert image.digest == result.digest and (image.root / "etc/hello").read_text() == "from the registry"
    assert ImageStore(tmp_path / "store").resolve(f"{open_registry.host}/tests/hello:1") == image
    # By digest, again: nothing is downloaded twice.
    again = pull(f"{open_registry.host}/tests/hello@{result.digest}", tmp_path / "pulled")
    assert again.digest == result.digest and again.downloaded_bytes == 0 and again.reused_bytes > 0


def test_token_auth_refuses_anonymous_pulls_and_takes_credentials(token_registry: Registry, tmp_path: Path) -> None:
    token_registry.push(small_layout(tmp_path / "src", "private"), "team/private:2")
    ref = f"{token_registry.host}/team/private:2"
    with pytest.raises(ImageError, match=r"refused .* \(401\): give credentials"):
        pull(ref, tmp_path / "anonymous")
    with pytest.raises(ImageError, match="check that user 'trainer' and its password are right"):
        pull(ref, tmp_path / "wrong", credentials=Credentials(USER, "wrong"))
    result = pull(ref, tmp_path / "pulled", credentials=Credentials(USER, PASSWORD))
    assert (tmp_path / "pulled/blobs/sha256" / result.digest.removeprefix("sha256:")).is_file()


def test_credentials_come_from_the_environment_or_docker_config(
    token_registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_registry.push(small_layout(tmp_path / "src", "docker config"), "team/dc:1")
    config = tmp_path / "docker"
    config.mkdir()
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {f"http://{token_registry.host}": {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    assert credentials_for(token_registry.host) == Credentials(USER, PASSWORD)
    pull(f"{token_registry.host}/team/dc:1", tmp_path / "one")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("ROLLBOX_REGISTRY_USER", USER)
    monkeypatch.setenv("ROLLBOX_REGISTRY_PASSWORD", PASSWORD)
    pull(f"{token_registry.host}/team/dc:1", tmp_path / "two")


def _image_for(path: Path, arch: str) -> dict[str, object]:
    """Write an image for linux/``arch`` (its file /arch says which) into the layout ``path``: its descriptor."""
    write_layout(path, [tar_layer([Entry("arch", data=arch.encode())])])
    manifest_digest = json.loads((path / "index.json").read_text())["manifests"][0]["digest"]
    manifest = json.loads((path / "blobs/sha256" / manifest_digest.removeprefix("sha256:")).read_bytes())
    config_path = path / "blobs/sha256" / manifest["config"]["digest"].removeprefix("sha256:")
    data = json.dumps(json.loads(config_path.read_bytes()) | {"architecture": arch}).encode()
    (path / "blobs/sha256" / sha256(data).removeprefix("sha256:")).write_bytes(data)
    manifest["config"] |= {"digest": sha256(data), "size": len(data)}
    data = json.dumps(manifest).encode()
    (path / "blobs/sha256" / sha256(data).removeprefix("sha256:")).write_bytes(data)
    return {"mediaType": manifest["mediaType"], "digest": sha256(data), "size": len(data),
            "platform": {"os": "linux", "architecture": arch}}  # fmt: skip


_TWO_PLATFORMS = sorted([ARCH, OTHER_ARCH])


def _two_platform_layout(path: Path) -> Path:
    """A layout whose index.json names an image index of an image for this machine and one for another (different
    files), in the order of their architectures' names (``_TWO_PLATFORMS``)."""
    entries = [_image_for(path, arch) for arch in _TWO_PLATFORMS]
    data = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                       "manifests": entries}).encode()  # fmt: skip
    (path / "blobs/sha256" / sha256(data).removeprefix("sha256:")).write_bytes(data)
    index = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": sha256(data), "size": len(data)}
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [index]}))
    return path


def test_an_image_of_another_platform_alone_is_refused(open_registry: Registry, tmp_path: Path) -> None:
    entry = _image_for(tmp_path / "src", OTHER_ARCH)
    (tmp_path / "src/index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    open_registry.push(tmp_path / "src", "tests/arm-only:1")
    with pytest.raises(ImageError, match=f"is an image for linux/{OTHER_ARCH} only, not {this_platform()}: pull one"):
        pull(f"{open_registry.host}/tests/arm-only:1", tmp_path / "pulled")
    assert not (tmp_path / "pulled/index.json").exists()


def test_a_manifest_list_gives_this_machines_platform(open_registry: Registry, tmp_path: Path) -> None:
    open_registry.push(_two_platform_layout(tmp_path / "src"), "tests/multi:1", all_platforms=True)
    ref = f"{open_registry.host}/tests/multi:1"
    image = ImageStore(tmp_path / "store").import_layout(pull(ref, tmp_path / "here").layout)
    assert (image.root / "arch").read_text() == ARCH and image.platform == this_platform()
    other = pull(ref, tmp_path / "other", platform=f"linux/{OTHER_ARCH}")  # a layout to copy elsewhere
    with pytest.raises(ImageError, match=rf"is for linux/{OTHER_ARCH}, not this machine's {this_platform()}: its"):
        ImageStore(tmp_path / "store").import_layout(other.layout)  # but not to run here
    both = ", ".join(f"linux/{arch}" for arch in _TWO_PLATFORMS)
    with pytest.raises(ImageError, match=rf"has no image for linux/s390x \(it has {both}\)"):
        pull(ref, tmp_path / "none", platform="linux/s390x")


def test_pull_image_refuses_another_platform_before_downloading_its_layers(
    open_registry: Registry, tmp_path: Path
) -> None:
    store = ImageStore(tmp_path / "store")
    open_registry.push(_two_platform_layout(tmp_path / "src"), "tests/other-arch:1", all_platforms=True)
    ref = f"{open_registry.host}/tests/other-arch:1"
    other = f"linux/{OTHER_ARCH}"
    with pytest.raises(ImageError, match=rf"the platform {other} is not this machine's \({this_platform()}\): the"):
        pull_image(store, ref, platform=other)  # asked for: refused before anything is downloaded
    assert not list((download_dir(store, ref) / "blobs").rglob("*"))
    entry = _image_for(tmp_path / "alone", other.split("/")[1])
    (tmp_path / "alone/index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    open_registry.push(tmp_path / "alone", "tests/other-arch-alone:1")
    ref = f"{open_registry.host}/tests/other-arch-alone:1"
    with pytest.raises(ImageError, match=rf"is an image for {other} only, not {this_platform()}: pull one built"):
        pull_image(store, ref)  # its configuration says so: refused before a layer is downloaded
    kept = {p.name.removesuffix(".partial") for p in (download_dir(store, ref) / "blobs" / "sha256").iterdir()}
    layers = {d.removeprefix("sha256:") for d in open_registry.layers("tests/other-arch-alone", "1")}
    assert layers and not kept & layers


def test_an_interrupted_download_resumes_where_it_stopped(open_registry: Registry, tmp_path: Path) -> None:
    big = os.urandom(6 << 20)  # incompressible: the blob is as big as this
    layout = write_layout(tmp_path / "src", [tar_layer([Entry("big", data=big)])], compress=False, ref="1")
    open_registry.push(layout, "tests/big:1")
    ref = f"{open_registry.host}/tests/big:1"

    def stop_midway(progress: PullProgress) -> None:
        if progress.done_bytes > 2 << 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pull(ref, tmp_path / "pulled", on_progress=stop_midway)
    partial = list((tmp_path / "pulled/blobs/sha256").glob("*.partial"))
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < len(big)
    kept = partial[0].stat().st_size
    result = pull(ref, tmp_path / "pulled")
    assert result.reused_bytes >= kept and result.downloaded_bytes < len(big)
    assert result.downloaded_bytes == len(big_blob(result.layout)) - kept  # a Range request: the rest only
    image = ImageStore(tmp_path / "store").import_layout(result.layout)
    assert (image.root / "big").read_bytes() == big


def big_blob(layout: Path) -> bytes:
    return max((p.read_bytes() for p in (layout / "blobs/sha256").iterdir()), key=len)


def test_a_corrupt_blob_is_refused_and_nothing_of_it_is_kept(open_registry: Registry, tmp_path: Path) -> None:
    tar = tar_layer([Entry("file", data=b"the real content " * 1000)])
    layout = write_layout(tmp_path / "src", [tar], compress=False, ref="1")
    open_registry.push(layout, "tests/corrupt:1")
    (layer,) = open_registry.layers("tests/corrupt", "1")
    data = open_registry.blob_data(layer)
    corrupt = bytearray(data.read_bytes())
    corrupt[len(corrupt) // 2] ^= 0xFF  # same size, another digest
    data.write_bytes(corrupt)
    with pytest.raises(ImageError, match=rf"blob {layer} came as .* with digest sha256:\w+, not .*: refused"):
        pull(f"{open_registry.host}/tests/corrupt:1", tmp_path / "pulled")
    assert not (tmp_path / "pulled/index.json").exists()
    kept = list((tmp_path / "pulled/blobs/sha256").iterdir())
    assert [sha256(p.read_bytes()).removeprefix("sha256:") for p in kept] == [p.name for p in kept]  # verified only
    assert layer.removeprefix("sha256:") not in [p.name for p in kept]  # neither the layer nor its .partial


def test_a_manifest_that_is_not_what_its_digest_says_is_refused(open_registry: Registry, tmp_path: Path) -> None:
    open_registry.push(small_layout(tmp_path / "src", "tampered"), "tests/tampered:1")
    digest = httpx.head(
        f"http://{open_registry.host}/v2/tests/tampered/manifests/1",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    ).headers["Docker-Content-Digest"]
    data = open_registry.blob_data(digest)
    data.write_bytes(b" " + data.read_bytes())  # still JSON, another digest
    for target in ("tests/tampered:1", f"tests/tampered@{digest}"):
        with pytest.raises(ImageError, match=rf"the manifest .* has digest sha256:\w+, not {digest}: refused"):
            pull(f"{open_registry.host}/{target}", tmp_path / "pulled")
    assert not (tmp_path / "pulled/index.json").exists()


def test_unknown_images_and_unreachable_registries_are_one_line(open_registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="has no manifest nope in tests/missing"):
        pull(f"{open_registry.host}/tests/missing:nope", tmp_path / "a")
    with pytest.raises(ImageError, match=r"registry 127.0.0.1:\d+ cannot be reached .*check the address"):
        pull(f"127.0.0.1:{free_port()}/tests/x:1", tmp_path / "b")
    with pytest.raises(ImageError, match="is not a tag"):
        pull("alpine:bad tag", tmp_path / "c")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("alpine", Reference("docker.io", "library/alpine", "latest")),
        ("alpine:3.19", Reference("docker.io", "library/alpine", "3.19")),
        ("user/app:v1", Reference("docker.io", "user/app", "v1")),
        ("docker.io/library/alpine", Reference("docker.io", "library/alpine", "latest")),
        ("index.docker.io/user/app", Reference("docker.io", "user/app", "latest")),
        ("localhost/app", Reference("localhost", "app", "latest")),
        ("127.0.0.1:5000/a/b:c", Reference("127.0.0.1:5000", "a/b", "c")),
        ("ghcr.io/o/r@sha256:" + "a" * 64, Reference("ghcr.io", "o/r", None, "sha256:" + "a" * 64)),
        ("ghcr.io/o/r:t@sha256:" + "b" * 64, Reference("ghcr.io", "o/r", "t", "sha256:" + "b" * 64)),
    ],
)
def test_references_are_read_as_docker_reads_them(text: str, expected: Reference) -> None:
    assert parse_reference(text) == expected


@pytest.mark.parametrize("text", ["", "Alpine", "a:b:c", "a@sha256:short", "host:99/", "a//b", "a:-x", "a b"])
def test_what_is_not_a_reference_is_one_clear_line(text: str) -> None:
    with pytest.raises(ImageError, match=f"image reference {text!r}: "):
        parse_reference(text)


_component = st.from_regex(r"[a-z0-9]+([._-][a-z0-9]+)?", fullmatch=True)


@given(
    host=st.sampled_from(["docker.io", "ghcr.io", "127.0.0.1:5000", "localhost", "reg.example:443"]),
    parts=st.lists(_component, min_size=1, max_size=3),
    tag=st.none() | st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True),
    digest=st.none() | st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True),
)
def test_a_reference_reads_back_as_itself(host: str, parts: list[str], tag: str | None, digest: str | None) -> None:
    repository = "/".join(parts) if host != "docker.io" or len(parts) > 1 else f"library/{parts[0]}"
    ref = Reference(host, repository, tag if tag or digest else "latest", digest)
    assert parse_reference(str(ref)) == ref


class _HostileRegistry:
    """A registry on 127.0.0.1 that answers every manifest request with ``manifest`` (whatever it is) and serves
    the blobs in ``blobs``: what a broken or hostile registry may send."""

    def __init__(self) -> None:
        self.manifest: bytes = b"{}"
        self.blobs: dict[str, bytes] = {}
        self.challenge: str | None = None
        self.cut_blobs = False
        #: Called halfway through sending a blob (another writer filling the disk meanwhile, say).
        self.halfway: Callable[[], None] | None = None
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                kind, _, target = self.path.rpartition("/")
                if registry.challenge is not None and "/v2/" in self.path:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", registry.challenge)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = registry.manifest if kind.endswith("/manifests") else registry.blobs.get(target)
                self.send_response(404 if body is None else 200)
                if body and "gzip" in self.headers.get("Accept-Encoding", "") and not kind.endswith("/manifests"):
                    body = gzip.compress(body)  # as a server or proxy may, when the client allows it
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                if len(body or b"") > 4096 and not kind.endswith("/manifests"):
                    self.wfile.write(body[: len(body) // 2])
                    if registry.cut_blobs:  # the connection drops
                        self.close_connection = True
                        return
                    self.wfile.flush()
                    if registry.halfway is not None:
                        registry.halfway()
                    body = body[len(body) // 2 :]
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def hostile() -> Iterator[_HostileRegistry]:
    running = _HostileRegistry()
    yield running
    running.server.shutdown()
    running.server.server_close()


_CONFIG = json.dumps({"os": "linux", "architecture": ARCH, "rootfs": {"type": "layers", "diff_ids": []}}).encode()
_VALID: dict[str, object] = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        "digest": sha256(_CONFIG),
        "size": len(_CONFIG),
    },
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": sha256(b"x" * 10), "size": 10}],
}
_INDEX: dict[str, object] = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{"digest": sha256(b"m"), "size": 1, "platform": {"os": "linux", "architecture": ARCH}}],
}
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def _manifests(draw: st.DrawFn) -> bytes:
    """Any JSON, or a valid manifest or index with one part (at any depth) replaced by any JSON, or bytes."""
    choice = draw(st.sampled_from(["json", "manifest", "index", "bytes"]))
    if choice == "bytes":
        return draw(st.binary(max_size=64))
    if choice == "json":
        return json.dumps(draw(_json)).encode()
    doc = json.loads(json.dumps(_VALID if choice == "manifest" else _INDEX))
    node = doc
    while True:
        key = draw(st.sampled_from(sorted(node)) if isinstance(node, dict) else st.integers(0, len(node) - 1))
        if not isinstance(node[key], (dict, list)) or not node[key] or draw(st.booleans()):
            node[key] = draw(_json)
            return json.dumps(doc).encode()
        node = node[key]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(manifest=_manifests())
def test_whatever_a_registry_sends_as_a_manifest_is_an_image_error(
    hostile: _HostileRegistry, tmp_path: Path, manifest: bytes
) -> None:
    hostile.manifest = manifest
    hostile.blobs = {sha256(_CONFIG): _CONFIG, sha256(b"x" * 10): b"x" * 10}
    try:
        pull(f"{hostile.host}/tests/hostile:1", tmp_path / "pulled")
    except ImageError as exc:
        assert "\n" not in str(exc)


_header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=st.tuples(
        st.sampled_from(["Bearer", "Basic", "bearer", "Digest", ""]),
        _header_text | st.sampled_from(["SELF", "http://127.0.0.1:1/t", "ftp://x/", "http://[::1", "::", "/token"]),
        _header_text,
        st.sampled_from([b"[]", b"{}", b'{"token": 5}', b"not json", b'{"token": "a\\nb"}', b'{"token": "t"}']),
    )
)
def test_whatever_a_registry_challenges_with_is_an_image_error(
    hostile: _HostileRegistry, tmp_path: Path, case: tuple[str, str, str, bytes]
) -> None:
    """A challenge of any scheme and realm, and a token service's answer of any shape: one ImageError line."""
    scheme, realm, rest, token_answer = case
    realm = f"http://{hostile.host}/token" if realm == "SELF" else realm
    hostile.challenge = f'{scheme} realm="{realm}",{rest}'
    hostile.blobs = {"token": token_answer}
    try:
        with pytest.raises(ImageError) as caught:
            pull(f"{hostile.host}/tests/hostile:1", tmp_path / "pulled", credentials=Credentials("u", "p"))
        assert "\n" not in str(caught.value)
    finally:
        hostile.challenge = None


def test_blobs_come_as_stored_even_from_a_server_that_would_compress_them(
    hostile: _HostileRegistry, tmp_path: Path
) -> None:
    hostile.manifest = json.dumps(_VALID).encode()
    hostile.blobs = {sha256(_CONFIG): _CONFIG, sha256(b"x" * 10): b"x" * 10}
    result = pull(f"{hostile.host}/tests/plain:1", tmp_path / "pulled")
    assert (tmp_path / "pulled/blobs/sha256" / sha256(b"x" * 10).removeprefix("sha256:")).read_bytes() == b"x" * 10
    assert result.digest == sha256(hostile.manifest)


def test_a_dropped_connection_keeps_what_came_and_the_next_pull_resumes(
    hostile: _HostileRegistry, tmp_path: Path
) -> None:
    layer = os.urandom(1 << 20)
    manifest = json.loads(json.dumps(_VALID))
    manifest["layers"][0] |= {"digest": sha256(layer), "size": len(layer)}
    hostile.manifest = json.dumps(manifest).encode()
    hostile.blobs = {sha256(_CONFIG): _CONFIG, sha256(layer): layer}
    hostile.cut_blobs = True
    try:
        with pytest.raises(
            ImageError, match=r"the connection to registry .* broke during blob .*: pull again to resume"
        ):
            pull(f"{hostile.host}/tests/cut:1", tmp_path / "pulled")
    finally:
        hostile.cut_blobs = False
    (partial,) = (tmp_path / "pulled/blobs/sha256").glob("*.partial")
    assert 0 < partial.stat().st_size < len(layer)
    # This server ignores Range (it answers 200 with the whole blob): the download starts again, and is right.
    progress: list[PullProgress] = []
    result = pull(f"{hostile.host}/tests/cut:1", tmp_path / "pulled", on_progress=progress.append)
    assert progress[-1].done_bytes == progress[-1].total_bytes == len(layer) + len(_CONFIG)
    assert (result.downloaded_bytes, result.reused_bytes) == (len(layer), len(_CONFIG))
    assert not list((tmp_path / "pulled/blobs/sha256").glob("*.partial"))
    assert (tmp_path / "pulled/blobs/sha256" / sha256(layer).removeprefix("sha256:")).read_bytes() == layer


def _stating(hostile: _HostileRegistry, layer: bytes, size: int) -> None:
    """Serve a manifest whose one layer is ``layer``, stated to be ``size`` bytes."""
    manifest = json.loads(json.dumps(_VALID))
    manifest["layers"][0] |= {"digest": sha256(layer), "size": size}
    hostile.manifest = json.dumps(manifest).encode()
    hostile.blobs = {sha256(_CONFIG): _CONFIG, sha256(layer): layer}


def test_a_blob_stated_over_the_limit_is_refused_before_anything_is_downloaded(
    hostile: _HostileRegistry, tmp_path: Path
) -> None:
    _stating(hostile, b"\0" * 8192, 10**12)  # what a hostile registry says to fill the disk
    with pytest.raises(ImageError, match=r"states blob sha256:\w+ is 1,000,000,000,000 bytes, over the limit of "):
        pull(f"{hostile.host}/tests/huge:1", tmp_path / "pulled")
    _stating(hostile, b"\0" * 8192, 8192)
    with pytest.raises(ImageError, match=r"over the limit of 4,096 \(max_blob_bytes, --max-blob-size\)"):
        pull(f"{hostile.host}/tests/huge:1", tmp_path / "pulled", max_blob_bytes=4096)
    assert not any((tmp_path / "pulled/blobs/sha256").iterdir())
    pull(f"{hostile.host}/tests/huge:1", tmp_path / "pulled", max_blob_bytes=8192)


def test_a_blob_the_disk_has_no_room_for_is_not_started_and_one_that_fills_it_is_deleted(
    hostile: _HostileRegistry, small_disk: Path
) -> None:
    layout = small_disk / "pulled"
    _stating(hostile, b"\0" * 8192, 64 << 20)  # more than the disk holds
    with pytest.raises(
        ImageError, match=rf"needs {(64 << 20) + len(_CONFIG):,} bytes more, and .* has [\d,]+ free: free space"
    ):
        pull(f"{hostile.host}/tests/big:1", layout)
    assert not list(layout.glob("blobs/sha256/*.partial"))
    layer = os.urandom(4 << 20)
    _stating(hostile, layer, len(layer))

    def fill() -> None:
        with contextlib.suppress(OSError), (small_disk / "filler").open("wb", buffering=0) as out:
            while True:
                out.write(b"\0" * 65536)

    hostile.halfway = fill
    try:
        with pytest.raises(ImageError, match=r"cannot write blob .*: No space left on device: free space there"):
            pull(f"{hostile.host}/tests/big:1", layout)
    finally:
        hostile.halfway = None
    assert not list(layout.glob("blobs/sha256/*.partial"))  # a partial kept would keep the disk full


def test_an_image_the_disk_has_no_room_for_is_refused_before_any_blob_though_each_fits_alone(
    hostile: _HostileRegistry, small_disk: Path
) -> None:
    layers = [b"\1" * 8192, b"\2" * 8192]
    manifest = json.loads(json.dumps(_VALID))
    stated = 9 << 20  # each fits the 16 MiB disk alone, both do not
    manifest["layers"] = [{**manifest["layers"][0], "digest": sha256(layer), "size": stated} for layer in layers]
    hostile.manifest = json.dumps(manifest).encode()
    hostile.blobs = {sha256(_CONFIG): _CONFIG, **{sha256(layer): layer for layer in layers}}
    with pytest.raises(ImageError, match=rf"the image needs {2 * stated + len(_CONFIG):,} bytes more, and .* free"):
        pull(f"{hostile.host}/tests/two-big:1", small_disk / "pulled")
    assert not list((small_disk / "pulled/blobs/sha256").iterdir())  # not even the configuration


def test_a_pull_whose_import_fails_deletes_what_it_downloaded(hostile: _HostileRegistry, tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    kept = os.urandom(1 << 10)
    _stating(hostile, kept, len(kept))  # downloaded by an earlier pull: not this one's to delete
    pull(f"{hostile.host}/tests/refused:1", download_dir(store, f"{hostile.host}/tests/refused:1"))
    layer = os.urandom(1 << 20)
    manifest = json.loads(json.dumps(_VALID))
    manifest["layers"] = [{**manifest["layers"][0], "digest": sha256(b), "size": len(b)} for b in (kept, layer)]
    hostile.manifest = json.dumps(manifest).encode()
    hostile.blobs = {sha256(_CONFIG): _CONFIG, sha256(kept): kept, sha256(layer): layer}
    # Its configuration names no layer (diff_ids []): the import refuses the image, for good.
    with pytest.raises(ImageError, match="has 2 layers but its configuration 0 diff_ids"):
        pull_image(store, f"{hostile.host}/tests/refused:1")
    blobs = download_dir(store, f"{hostile.host}/tests/refused:1") / "blobs" / "sha256"
    left = {p.name for p in blobs.iterdir()}
    assert sha256(layer).removeprefix("sha256:") not in left and sha256(kept).removeprefix("sha256:") in left
    assert sha256(hostile.manifest).removeprefix("sha256:") not in left and not any(".partial" in n for n in left)


def test_gc_leaves_an_old_download_while_a_pull_of_a_repository_nested_in_it_runs(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    outer = store.downloads / "registry.test" / "a"
    inner = outer / "b"  # the download of registry.test/a/b, inside that of registry.test/a
    for tree in (outer, inner):
        (tree / "blobs" / "sha256").mkdir(parents=True)
        (tree / "blobs" / "sha256" / "0.partial").write_bytes(b"x" * 4096)
        (tree / ".pull.lock").touch()
    hour_ago = time.time() - 3700
    for base, dirs, files in os.walk(store.downloads):
        for name in [*dirs, *files]:
            os.utime(os.path.join(base, name), (hour_ago, hour_ago))
    with (inner / ".pull.lock").open() as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a pull of registry.test/a/b under way
        assert store.gc() == 0
        assert (inner / "blobs" / "sha256" / "0.partial").read_bytes() == b"x" * 4096
        assert (outer / "blobs" / "sha256" / "0.partial").is_file()
    assert store.gc() > 0 and not (store.downloads / "registry.test").exists()  # no pull now: both go


def test_gc_removes_the_downloads_of_interrupted_pulls_but_not_a_recent_or_running_one(
    hostile: _HostileRegistry, tmp_path: Path
) -> None:
    store = ImageStore(tmp_path / "store")
    layer = os.urandom(1 << 20)
    _stating(hostile, layer, len(layer))
    hostile.cut_blobs = True
    try:
        for repository in ("tests/left", "tests/running"):
            with pytest.raises(ImageError, match="pull again to resume"):
                pull_image(store, f"{hostile.host}/{repository}:1")
    finally:
        hostile.cut_blobs = False
    left, running = (download_dir(store, f"{hostile.host}/tests/{name}:1") for name in ("left", "running"))
    assert store.gc() == 0 and list(left.glob("blobs/sha256/*.partial"))  # recent: kept to resume
    hour_ago = time.time() - 3700
    for base, dirs, files in os.walk(store.downloads):
        for name in [*dirs, *files]:
            os.utime(os.path.join(base, name), (hour_ago, hour_ago))
    with (running / ".pull.lock").open() as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a pull of it under way
        assert store.gc() >= len(layer) // 2
    assert not left.parent.joinpath(left.name).exists() and list(running.glob("blobs/sha256/*.partial"))
