"""The class of hostile layers, proven closed by property: whatever sequence of tar entries a layer holds (names
with ``..``, absolute names, links to anywhere, links then entries below them, hard links to files outside, devices,
set-ID modes), unpacking it either refuses it with an ImageError or leaves a tree in which nothing lies outside the
layer's directory, nothing outside was written or linked to, and no entry is a device or has a set-ID bit. Whiteouts
likewise: whatever follows ``.wh.``, one is refused or removes only an entry of its own directory when a root is
composed."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oci_images import Entry, tar_layer
from rollbox.sandbox.images import ImageError
from rollbox.sandbox.images._compose import compose_root
from rollbox.sandbox.images._unpack import unpack_layer

OUTSIDE = Path(tempfile.mkdtemp(prefix="rollbox-fuzz-outside-"))
VICTIM = OUTSIDE / "victim"
VICTIM.write_text("untouched\n")

components = st.sampled_from(["a", "b", "..", ".", "", "dev", ".wh.a", "victim"])
kinds = st.sampled_from(["file", "dir", "symlink", "hardlink", "symlink", "hardlink", "chr", "blk", "fifo"])


@st.composite
def layers(draw: st.DrawFn) -> list[Entry]:
    """Entries that often meet: each one's name below an earlier one's (a link, then an entry below it), its link
    target an earlier name, a path through one, or a place outside."""
    entries: list[Entry] = []
    made = ["a"]
    for _ in range(draw(st.integers(1, 8))):
        parts = [draw(st.sampled_from(["", *made])), *draw(st.lists(components, min_size=1, max_size=2))]
        name = ("/" if draw(st.booleans()) else "") + "/".join(p for p in parts if p)
        outside = [str(OUTSIDE), str(VICTIM), "/", "/etc/passwd", "../" * 6 + "etc", ".."]
        target = draw(st.sampled_from([*outside, *made, *(f"{m}/victim" for m in made)]))
        mode = draw(st.sampled_from([0o644, 0o755, 0o4755, 0o2755, 0o6777, 0o1777, 0o000]))
        entries.append(Entry(name, draw(kinds), draw(st.sampled_from([b"", b"x"])), mode, target))
        made.append(name.strip("/"))
    return entries


@pytest.fixture(scope="module", autouse=True)
def outside_removed() -> Iterator[None]:
    yield
    shutil.rmtree(OUTSIDE)


def _snapshot(path: Path) -> list[tuple[str, int, int]]:
    out = []
    for base, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            st_ = os.lstat(os.path.join(base, name))
            out.append((os.path.join(base, name), st_.st_mode, st_.st_size))
    return sorted(out)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers())
# The shapes of the known escapes, always tried besides the random ones: an entry below a link to outside, and a
# hard link to a file reached through such a link.
@example([Entry("a", "symlink", target=str(OUTSIDE)), Entry("a/b", data=b"x")])
@example([Entry("a", "symlink", target=str(OUTSIDE)), Entry("b", "hardlink", target="a/victim")])
def test_no_layer_writes_or_links_outside_its_directory_or_keeps_privileges(layer: list[Entry]) -> None:
    box = Path(tempfile.mkdtemp(prefix="rollbox-fuzz-box-"))
    try:
        blob = box / "blob"
        blob.write_bytes(tar_layer(layer))
        into = box / "layer"
        into.mkdir()
        outside_before = _snapshot(OUTSIDE)
        victim_links = os.stat(VICTIM).st_nlink
        try:
            unpack_layer(blob, into)
        except ImageError as exc:
            assert "\n" not in str(exc)
        assert sorted(os.listdir(box)) == ["blob", "layer"]
        assert _snapshot(OUTSIDE) == outside_before
        assert os.stat(VICTIM).st_nlink == victim_links and VICTIM.read_text() == "untouched\n"
        assert not Path("/a").exists() and not Path("/b").exists()
        for base, dirs, files in os.walk(into):
            for name in [*dirs, *files]:
                mode = os.lstat(os.path.join(base, name)).st_mode
                assert not stat.S_ISCHR(mode) and not stat.S_ISBLK(mode)
                assert not mode & (stat.S_ISUID | stat.S_ISGID)
    finally:
        shutil.rmtree(box)


#: What a lower layer holds, for a whiteout above it to remove.
LOWER = [Entry("a", "dir", mode=0o755), Entry("a/b", "dir", mode=0o755), Entry("a/b/c", data=b"c"), Entry("x")]


def _composed(box: Path, layers: list[Path]) -> Path:
    """Compose ``layers`` into ``box/parent/root``, beside ``box/parent/sibling``; returns the parent."""
    parent = box / "parent"
    (parent / "root").mkdir(parents=True)
    (parent / "sibling").write_text("precious\n")
    compose_root(layers, parent / "root")
    return parent


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["", "a/", "a/b/"]),
    st.text(alphabet=".ab", max_size=4),
    st.sampled_from(["file", "dir", "symlink", "fifo"]),
)
def test_a_whiteout_is_refused_or_removes_only_an_entry_of_its_own_directory(
    directory: str, removed: str, kind: str
) -> None:
    box = Path(tempfile.mkdtemp(prefix="rollbox-fuzz-whiteout-"))
    try:
        layers = []
        for n, entries in enumerate([LOWER, [Entry(f"{directory}.wh.{removed}", kind, target="x")]]):
            (box / f"blob{n}").write_bytes(tar_layer(entries))
            (box / f"layer{n}").mkdir()
            layers.append(box / f"layer{n}")
            try:
                unpack_layer(box / f"blob{n}", layers[-1])
            except ImageError as exc:
                assert removed in ("", ".", "..") and "names no entry of its directory" in str(exc)
                return
        assert removed not in ("", ".", "..")
        parent = _composed(box, layers)
        assert sorted(os.listdir(parent)) == ["root", "sibling"] and (parent / "sibling").read_text() == "precious\n"
        assert (parent / "root" / directory).is_dir()
        assert not (parent / "root" / directory / removed).exists()
    finally:
        shutil.rmtree(box)


@pytest.mark.parametrize("name", [".wh.", ".wh..", ".wh..."])
def test_composing_refuses_a_whiteout_of_no_entry_in_a_layer_unpacked_before_unpacking_refused_it(
    tmp_path: Path, name: str
) -> None:
    layer = tmp_path / "layer"
    (layer / "etc").mkdir(parents=True)
    (layer / "etc" / name).write_text("")
    with pytest.raises(ImageError, match=f"whiteout in /etc {name!r} names no entry of its directory"):
        _composed(tmp_path, [layer])
    assert sorted(os.listdir(tmp_path / "parent")) == ["root", "sibling"]
