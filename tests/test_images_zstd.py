"""zstd-compressed layers (``application/vnd.oci.image.layer.v1.tar+zstd``, what ``skopeo``, ``buildah`` and
Docker 23+ can push): imported as gzip ones are, both digests verified (the blob's and the uncompressed stream's
``diff_id``), several frames one after another read whole, and a corrupt or truncated stream refused in one line."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import zstandard

from oci_images import ARCH, Entry, tar_layer, write_layout
from rollbox.sandbox.images import ImageError, ImageStore

FILES = [
    Entry("bin", "dir", mode=0o755),
    Entry("bin/tool", data=b"#!/bin/sh\necho tool\n" * 50, mode=0o755),
    Entry("data", "dir", mode=0o755),
    Entry("data/big", data=bytes(range(256)) * 4096),
    Entry("data/link", "symlink", target="big"),
]
ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"


def _blob(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def zstd_layout(layout: Path, tar: bytes, blob: bytes, *, diff_id: str | None = None) -> Path:
    """An OCI image layout of one layer: ``blob`` (zstd of ``tar``, or not), its diff_id ``tar``'s unless given."""
    layout.mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    config = {
        "architecture": ARCH,
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [diff_id or "sha256:" + hashlib.sha256(tar).hexdigest()]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            **_blob(layout, json.dumps(config).encode()),
        },
        "layers": [{"mediaType": ZSTD_LAYER, **_blob(layout, blob)}],
    }
    entry = {"mediaType": manifest["mediaType"], **_blob(layout, json.dumps(manifest).encode())}
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    return layout


def frames(tar: bytes, count: int) -> bytes:
    """``tar`` as ``count`` zstd frames one after another (as a parallel compressor writes it)."""
    step = -(-len(tar) // count)
    return b"".join(zstandard.ZstdCompressor(level=3).compress(tar[i : i + step]) for i in range(0, len(tar), step))


@pytest.mark.parametrize("count", [1, 3])
def test_a_zstd_layer_is_imported_with_both_digests_verified(tmp_path: Path, count: int) -> None:
    tar = tar_layer(FILES)
    blob = frames(tar, count)
    image = ImageStore(tmp_path / "store").import_layout(zstd_layout(tmp_path / "layout", tar, blob))
    assert (image.root / "data" / "big").read_bytes() == bytes(range(256)) * 4096
    assert (image.root / "bin" / "tool").read_bytes().startswith(b"#!/bin/sh")
    assert (image.root / "data" / "link").readlink() == Path("big")


def test_a_zstd_layer_whose_stream_is_not_its_diff_id_is_refused(tmp_path: Path) -> None:
    tar = tar_layer(FILES)
    layout = zstd_layout(tmp_path / "layout", tar, frames(tar, 1), diff_id="sha256:" + "0" * 64)
    with pytest.raises(ImageError, match="diff_id") as info:
        ImageStore(tmp_path / "store").import_layout(layout)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda blob: blob[: len(blob) // 2], "the layer's zstd stream is truncated"),
        (lambda blob: blob[:8] + bytes(64) + blob[72:], "the layer's zstd stream is corrupt"),
    ],
)
def test_a_damaged_zstd_layer_is_one_line(tmp_path: Path, damage: object, said: str) -> None:
    tar = tar_layer(FILES)
    blob = damage(zstandard.ZstdCompressor().compress(tar))  # type: ignore[operator]
    store = ImageStore(tmp_path / "store")
    with pytest.raises(ImageError, match=said) as info:
        store.import_layout(zstd_layout(tmp_path / "layout", tar, blob))
    assert "\n" not in str(info.value)
    assert store.list() == []


def test_an_image_skopeo_recompressed_with_zstd_is_the_same_root(tmp_path: Path) -> None:
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed (scripts/setup installs it)")
    gzipped = write_layout(tmp_path / "gzip", [tar_layer(FILES)], ref="1")
    subprocess.run(
        ["skopeo", "copy", "--dest-compress-format", "zstd", f"oci:{gzipped}:1", f"oci:{tmp_path / 'zstd'}:1"],
        check=True,
        capture_output=True,
    )
    manifest_entry = json.loads((tmp_path / "zstd" / "index.json").read_text())["manifests"][0]
    manifest_blob = tmp_path / "zstd" / "blobs" / "sha256" / manifest_entry["digest"].removeprefix("sha256:")
    layers = json.loads(manifest_blob.read_text())["layers"]
    assert [layer["mediaType"] for layer in layers] == [ZSTD_LAYER]
    store = ImageStore(tmp_path / "store")
    # The zstd image first, into an empty store: the gzip one then finds its layer there (same diff_id).
    from_zstd = store.import_layout(tmp_path / "zstd")
    assert (from_zstd.root / "data" / "big").read_bytes() == bytes(range(256)) * 4096
    from_gzip = store.import_layout(gzipped)
    assert from_zstd.digest != from_gzip.digest  # other blobs, another manifest
    assert from_zstd.root_id == from_gzip.root_id  # the same uncompressed layers: one root, shared
