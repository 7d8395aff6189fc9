"""The class of malformed images, proven closed by property: whatever JSON value stands at whatever field of an
image's index.json, nested index, manifest or configuration (and whatever encoding a blob is in), every blob still
matching its digest, importing it gives an image or one ImageError, never another exception."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oci_images import Entry, tar_layer, write_layout
from rollbox.sandbox.images import ImageError, ImageStore
from rollbox.sandbox.images._layout import REF_NAME, this_platform

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
#: The documents of an image, top down; each names the next by its digest at ``LINKS[name]``.
DOCUMENTS = ("index.json", "nested index", "manifest", "configuration")
LINKS: dict[str, tuple[Any, ...]] = {
    "index.json": ("manifests", 0, "digest"),
    "nested index": ("manifests", 0, "digest"),
    "manifest": ("config", "digest"),
}
KEYS = [
    "manifests", "mediaType", "digest", "size", "annotations", "platform", "os", "architecture", "variant",
    "config", "layers", "rootfs", "diff_ids", "Env", "WorkingDir", "User", "Entrypoint", "Cmd", REF_NAME, "x",
]  # fmt: skip
_os, _arch = this_platform().split("/")[:2]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from([INDEX, MANIFEST, "sha256:" + "0" * 64, _os, _arch, "arm", "name/x:1", "A=1", ""])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
    max_leaves=6,
)


def _blob(layout: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}"


def _image(layout: Path) -> dict[str, dict[str, Any]]:
    """An image of one layer as four documents: index.json naming a nested index naming the manifest."""
    write_layout(layout, [tar_layer([Entry("etc", "dir"), Entry("etc/x", data=b"x")])], compress=False)
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs" / "sha256" / index["manifests"][0]["digest"][7:]).read_bytes())
    config = json.loads((layout / "blobs" / "sha256" / manifest["config"]["digest"][7:]).read_bytes())
    nested = {"schemaVersion": 2, "mediaType": INDEX, "manifests": index["manifests"]}
    nested["manifests"][0]["platform"] = {"os": _os, "architecture": _arch}
    top = {"schemaVersion": 2, "manifests": [{"mediaType": INDEX, "digest": "", "size": 0}]}
    return {"index.json": top, "nested index": nested, "manifest": manifest, "configuration": config}


@st.composite
def mutations(draw: st.DrawFn) -> tuple[str, list[Any], object, str]:
    """Which document, the path of the field in it (existing keys and indexes, or new keys), its new value, and the
    document's encoding."""
    document = draw(st.sampled_from(DOCUMENTS))
    path: list[Any] = [draw(st.sampled_from(KEYS))]
    for _ in range(draw(st.integers(0, 3))):
        path.append(draw(st.sampled_from([*KEYS, 0, 1])))
    return document, path, draw(values), draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-16", "utf-8-sig"]))


def _set(document: dict[str, Any], path: list[Any], value: object) -> None:
    """``value`` at ``path`` of ``document``, as far as the path leads through objects and arrays (it stops where
    it meets anything else, and replaces that)."""
    here: Any = document
    for i, step in enumerate(path):
        last = i == len(path) - 1
        if isinstance(here, dict) and isinstance(step, str):
            if last or not isinstance(here.get(step), dict | list):
                here[step] = value
                return
            here = here[step]
        elif isinstance(here, list) and isinstance(step, int) and step < len(here):
            if last or not isinstance(here[step], dict | list):
                here[step] = value
                return
            here = here[step]
        else:
            return


def _write(layout: Path, documents: dict[str, dict[str, Any]], mutation: tuple[str, list[Any], object, str]) -> None:
    """The documents, bottom up, each linked to the digest of the one below, then the mutated one changed: every
    blob matches its digest."""
    mutated, path, value, encoding = mutation
    below = ""
    for name in reversed(DOCUMENTS):
        document = documents[name]
        if name in LINKS:
            *to, key = LINKS[name]
            target: Any = document
            for step in to:
                target = target[step]
            target[key] = below
        if name == mutated:
            _set(document, path, value)
        data = json.dumps(document).encode(encoding if name == mutated else "utf-8")
        if name == "index.json":
            (layout / "index.json").write_bytes(data)
        else:
            below = _blob(layout, data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
# What was found to escape as AttributeError, TypeError or UnicodeDecodeError: annotations an array, a mediaType an
# array (a set's member), a manifest's mediaType an object, a manifest in UTF-16.
@example(("index.json", ["manifests", 0, "annotations"], ["x"], "utf-8"))
@example(("nested index", ["manifests", 0, "mediaType"], ["x"], "utf-8"))
@example(("manifest", ["mediaType"], {"a": 1}, "utf-8"))
@example(("manifest", ["x"], None, "utf-16"))
@example(("configuration", ["os"], ["linux"], "utf-8"))
@example(("nested index", ["manifests", 0, "platform", "variant"], {"a": 1}, "utf-8"))
def test_a_malformed_image_is_imported_or_refused_with_one_image_error(
    mutation: tuple[str, list[Any], object, str],
) -> None:
    work = Path(tempfile.mkdtemp(prefix="rollbox-layout-fuzz-"))
    try:
        _write(work / "layout", _image(work / "layout"), mutation)
        try:
            ImageStore(work / "store").import_layout(work / "layout")
        except ImageError as exc:
            assert "\n" not in str(exc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
