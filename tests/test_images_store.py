"""The image store, for real: layouts and archives written by the tests, imported, verified, unpacked, composed,
resolved, removed and collected; hostile layers refused or neutralised (see ``test_images_unpack_fuzz`` for the
property test of the whole class)."""

from __future__ import annotations

import concurrent.futures
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from oci_images import ARCH, OTHER_ARCH, Entry, docker_archive, oci_archive, tar_layer, write_layout
from rollbox.sandbox.images import ImageError, ImageStore
from rollbox.sandbox.images._layout import same_platform, this_platform

BASE = [
    Entry("bin", "dir", mode=0o755),
    Entry("bin/tool", data=b"#!/bin/sh\necho tool\n", mode=0o755),
    Entry("etc", "dir", mode=0o755),
    Entry("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"),
    Entry("etc/resolv.conf", data=b"nameserver 8.8.8.8\n"),
    Entry("gone", "dir"),
    Entry("gone/file", data=b"whited out\n"),
    Entry("opaque", "dir"),
    Entry("opaque/lower", data=b"hidden by the opaque marker\n"),
    Entry("keep", data=b"kept\n"),
    Entry("secret", data=b"owner only\n", mode=0o700),
]
TOP = [
    Entry(".wh.gone", data=b""),
    Entry("opaque", "dir"),
    Entry("opaque/.wh..wh..opq"),
    Entry("opaque/upper", data=b"from the top layer\n"),
    Entry("new", data=b"new\n"),
    Entry("hard", "hardlink", target="new"),
    Entry("link", "symlink", target="/etc/passwd"),
]


def image_layout(tmp_path: Path, name: str = "layout", **kw: object) -> Path:
    return write_layout(tmp_path / name, [tar_layer(BASE), tar_layer(TOP)], config={"Env": ["A=1"]}, **kw)  # type: ignore[arg-type]


def test_a_layout_is_imported_with_whiteouts_opaque_directories_and_links(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    image = store.import_layout(image_layout(tmp_path), ref="test/base:1")
    root = image.root
    assert (root / "bin" / "tool").read_bytes() == b"#!/bin/sh\necho tool\n"
    assert not (root / "gone").exists()  # a whiteout removes what a lower layer had
    assert sorted(os.listdir(root / "opaque")) == ["upper"]  # an opaque directory hides the lower layer's files
    assert (root / "keep").read_text() == "kept\n"
    assert os.readlink(root / "link") == "/etc/passwd"  # kept as written: only ever followed inside a sandbox
    assert os.stat(root / "hard").st_ino == os.stat(root / "new").st_ino
    assert not any(name.startswith(".wh.") for _b, ds, fs in os.walk(root) for name in [*ds, *fs])
    assert image.config.env == (("A", "1"),)
    assert image.refs == ("test/base:1",)
    assert image.digest.startswith("sha256:") and store.resolve("test/base:1") == image


def test_rollboxs_own_etc_and_mount_points_are_laid_over_the_image(tmp_path: Path) -> None:
    image = ImageStore(tmp_path / "store").import_layout(image_layout(tmp_path))
    passwd = (image.root / "etc" / "passwd").read_text().splitlines()
    assert "root:x:0:0:root:/root:/bin/sh" in passwd
    assert "sandbox:x:1000:1000:sandbox:/workspace:/bin/sh" in passwd
    assert not any(line.startswith("app:") for line in passwd)  # the image's user of uid 1000 gives way
    assert not (image.root / "etc" / "resolv.conf").exists()
    assert (image.root / "opt" / "rollbox" / "agent").is_file()
    # The image's own layer keeps its passwd: the root's is a new file, not written through the hard link.
    layers = list((tmp_path / "store" / "layers").iterdir())
    assert any((d / "etc" / "passwd").is_file() and b"app:" in (d / "etc" / "passwd").read_bytes() for d in layers)


def test_files_lose_set_id_bits_and_are_readable_as_by_their_owner(tmp_path: Path) -> None:
    layer = tar_layer(
        [
            Entry("suid", data=b"x", mode=0o4755),
            Entry("sgid", data=b"x", mode=0o2711),
            Entry("private", data=b"x", mode=0o600),
            Entry("sticky", "dir", mode=0o1777),
        ]
    )
    image = ImageStore(tmp_path / "store").import_layout(write_layout(tmp_path / "l", [layer]))
    modes = {name: stat.S_IMODE(os.lstat(image.root / name).st_mode) for name in ("suid", "sgid", "private", "sticky")}
    assert modes == {"suid": 0o755, "sgid": 0o755, "private": 0o644, "sticky": 0o777}


def test_a_layer_shared_by_two_images_is_unpacked_once(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    first = store.import_layout(write_layout(tmp_path / "a", [tar_layer(BASE)]))
    layers = tmp_path / "store" / "layers"
    (shared,) = [p for p in layers.iterdir() if p.is_dir()]
    inode = os.stat(shared / "keep").st_ino
    second = store.import_layout(write_layout(tmp_path / "b", [tar_layer(BASE), tar_layer(TOP)]))
    assert os.stat(shared / "keep").st_ino == inode  # not unpacked again
    assert os.stat(second.root / "keep").st_ino == inode  # and both roots link to it
    assert os.stat(first.root / "keep").st_ino == inode
    assert first.root != second.root and first.digest != second.digest


def test_importing_the_same_image_again_adds_its_reference(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    a = store.import_layout(image_layout(tmp_path), ref="one:1")
    b = store.import_layout(image_layout(tmp_path), ref="two:2")
    assert a == b and b.refs == ("one:1", "two:2")
    other = store.import_layout(write_layout(tmp_path / "o", [tar_layer(BASE)]), ref="one:1")
    assert store.resolve("one:1") == other  # a reference names one image: it moved
    assert store.resolve(a.digest).refs == ("two:2",)


def test_a_corrupt_layer_blob_is_refused_and_nothing_is_published(tmp_path: Path) -> None:
    layout = image_layout(tmp_path)
    manifest = json.loads(
        (
            layout / "blobs/sha256" / json.loads((layout / "index.json").read_text())["manifests"][0]["digest"][7:]
        ).read_text()
    )
    blob = layout / "blobs/sha256" / manifest["layers"][1]["digest"][7:]
    data = gzip.decompress(blob.read_bytes()).replace(b"from the top layer", b"from an attacker!!")
    blob.write_bytes(gzip.compress(data))
    store = ImageStore(tmp_path / "store")
    with pytest.raises(ImageError, match="does not match its digest") as info:
        store.import_layout(layout)
    assert "\n" not in str(info.value)
    assert store.list() == []
    assert not list((tmp_path / "store" / "roots").iterdir())
    assert list((tmp_path / "store" / ".tmp").iterdir()) == []
    # The untouched first layer may stay (verified); the tampered one is nowhere.
    assert len([p for p in (tmp_path / "store" / "layers").iterdir() if p.is_dir()]) <= 1


def test_a_layer_that_does_not_unpack_to_its_diff_id_is_refused(tmp_path: Path) -> None:
    layout = write_layout(tmp_path / "l", [tar_layer(BASE)], diff_ids=["sha256:" + "0" * 64])
    with pytest.raises(ImageError, match="not the diff_id"):
        ImageStore(tmp_path / "store").import_layout(layout)


def test_a_corrupt_manifest_is_refused(tmp_path: Path) -> None:
    layout = image_layout(tmp_path)
    digest = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"][7:]
    (layout / "blobs/sha256" / digest).write_text((layout / "blobs/sha256" / digest).read_text() + " ")
    with pytest.raises(ImageError, match="does not match its digest"):
        ImageStore(tmp_path / "store").import_layout(layout)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p, "not a directory"),
        (lambda p: (p.mkdir(), p)[1], "not an OCI image layout"),
    ],
)
def test_not_a_layout_is_one_clear_line(tmp_path: Path, make: object, message: str) -> None:
    path = make(tmp_path / "nothing")  # type: ignore[operator]
    with pytest.raises(ImageError, match=message) as info:
        ImageStore(tmp_path / "store").import_layout(path)
    assert "\n" not in str(info.value)


def test_a_docker_save_archive_is_imported(tmp_path: Path) -> None:
    archive = docker_archive(tmp_path / "saved.tar", [tar_layer(BASE), tar_layer(TOP)], config={"WorkingDir": "/w"})
    store = ImageStore(tmp_path / "store")
    image = store.import_archive(archive, ref="saved:1")
    assert sorted(os.listdir(image.root / "opaque")) == ["upper"]
    assert image.config.working_dir == "/w"
    assert store.resolve("saved:1") == image
    assert list((tmp_path / "store" / ".tmp").iterdir()) == []


def test_an_oci_archive_is_imported_as_its_layout_is(tmp_path: Path) -> None:
    layout = image_layout(tmp_path)
    store = ImageStore(tmp_path / "store")
    from_archive = store.import_archive(oci_archive(layout, tmp_path / "oci.tar"))
    assert from_archive == store.import_layout(layout)


def test_a_hostile_archive_is_refused(tmp_path: Path) -> None:
    archive = docker_archive(tmp_path / "saved.tar", [tar_layer(BASE)])
    import tarfile

    with tarfile.open(archive, "a") as tar:
        info = tarfile.TarInfo("../../escaped")
        tar.addfile(info)
    with pytest.raises(ImageError, match="outside it"):
        ImageStore(tmp_path / "store").import_archive(archive)
    assert not (tmp_path / "escaped").exists()


def test_resolve_by_reference_digest_and_prefix(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    image = store.import_layout(image_layout(tmp_path), ref="repo/name:latest")
    hex_digest = image.digest[7:]
    names = ("repo/name", "repo/name:latest", "docker.io/repo/name", image.digest, hex_digest[:12])
    for name in (*names, f"repo/name@{image.digest}"):
        assert store.resolve(name) == image, name
    with pytest.raises(ImageError, match=r"no image 'repo/other:1'.*rollbox images pull") as info:
        store.resolve("repo/other:1")
    assert "\n" not in str(info.value)


def test_remove_then_gc_frees_what_no_image_names_but_not_a_held_root(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    kept = store.import_layout(write_layout(tmp_path / "a", [tar_layer(BASE)]), ref="kept:1")
    held = store.import_layout(write_layout(tmp_path / "b", [tar_layer(BASE), tar_layer(TOP)]), ref="held:1")
    fd = held.hold()  # a sandbox runs on it
    try:
        store.remove("held:1")
        assert [i.refs for i in store.list()] == [("kept:1",)]
        store.gc()
        assert held.root.is_dir()  # still held
    finally:
        os.close(fd)
    freed = store.gc()
    assert freed > 0
    assert not held.root.exists()
    assert kept.root.is_dir() and (kept.root / "keep").read_text() == "kept\n"
    layer_dirs = [p for p in (tmp_path / "store" / "layers").iterdir() if p.is_dir()]
    assert [p.name for p in layer_dirs] == [hashlib.sha256(tar_layer(BASE)).hexdigest()]
    with pytest.raises(ImageError):
        store.remove("held:1")


def _watch_fsync(monkeypatch: pytest.MonkeyPatch) -> set[tuple[int, int]]:
    """The (device, inode) of every file and directory flushed with ``os.fsync`` from now on (flushed all the same)."""
    flushed: set[tuple[int, int]] = set()
    fsync = os.fsync

    def observed(fd: int) -> None:
        st = os.fstat(fd)
        flushed.add((st.st_dev, st.st_ino))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", observed)
    return flushed


def test_an_image_record_is_on_disk_before_its_name_and_a_partial_one_is_ignored_then_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed = _watch_fsync(monkeypatch)
    store = ImageStore(tmp_path / "store")
    image = store.import_layout(image_layout(tmp_path), ref="test/base:1")
    store.import_layout(write_layout(tmp_path / "other", [tar_layer(BASE)]), ref="test/base:1")  # moves the ref
    manifests = tmp_path / "store" / "manifests"
    for path in [manifests, *manifests.iterdir()]:
        # Each record's data, and the rename that names it, reached the disk: a power loss cannot leave it empty.
        assert (path.stat().st_dev, path.stat().st_ino) in flushed, path.name
    assert [p.name for p in manifests.iterdir() if p.name.startswith(".")] == []
    # What a writer cut off by a crash left (a temporary name, partly written) is never an image, and gc removes it.
    partials = [manifests / f".{image.digest[7:]}.json.new", manifests / f".{image.digest[7:]}.json.x1y2.new"]
    for partial in partials:
        partial.write_text('{"digest": ')
        os.utime(partial, (0, 0))
    assert {i.digest for i in store.list()} == {image.digest, store.resolve("test/base:1").digest}
    store.gc()
    assert not any(p.exists() for p in partials)
    assert store.resolve(image.digest).refs == ()


_OPENED: list[str] = []  # what the audit hook below saw opened, while a test listens


def _listen(event: str, args: tuple[object, ...]) -> None:
    if event == "open" and _OPENED and isinstance(args[0], str):
        _OPENED.append(args[0])


sys.addaudithook(_listen)


def test_a_composed_root_is_published_without_opening_the_layers_files_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [Entry(f"many/f{i}", data=f"{i}\n".encode()) for i in range(300)]
    layout = write_layout(tmp_path / "layout", [tar_layer([*BASE, Entry("many", "dir"), *files])])
    flushed = _watch_fsync(monkeypatch)
    _OPENED[:] = ["(listening)"]
    try:
        image = ImageStore(tmp_path / "store").import_layout(layout)
    finally:
        opened, _OPENED[:] = _OPENED[1:], []
    in_root = [p for p in opened if "/.tmp/root-" in p and "/many/" in p]
    # Its files are hard links to the layer's, flushed when the layer was published: none is opened again.
    assert in_root == []
    assert len([p for p in opened if "/.tmp/layer-" in p and "/many/" in p]) >= 300  # the layer's were, once
    for path in [image.root, image.root / "many", image.root / "etc", image.root / "etc" / "hosts"]:
        # Its directories and the files rollbox wrote into it (not links) are flushed.
        assert (path.stat().st_dev, path.stat().st_ino) in flushed, path
    assert (image.root / "many" / "f299").read_text() == "299\n"


# ------------------------------------------------------------------------------------------- hostile layers


def _import(tmp_path: Path, entries: list[Entry]) -> Path:
    store = ImageStore(tmp_path / "store")
    return store.import_layout(write_layout(tmp_path / "hostile", [tar_layer(entries)])).root


def test_path_traversal_is_refused_and_nothing_is_written_outside(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="climbs out of the image"):
        _import(tmp_path, [Entry("a", "dir"), Entry("a/../../../pwned", data=b"x")])
    assert not list(tmp_path.rglob("pwned"))


@pytest.mark.parametrize("mtime", ["inf", "nan", "1e30"])
def test_a_modification_time_no_file_can_have_is_refused(tmp_path: Path, mtime: str) -> None:
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("etc/x")
        info.size, info.pax_headers = 1, {"mtime": mtime}  # tarfile reads it as a float; no file can have it
        tar.addfile(info, io.BytesIO(b"x"))
    layout = write_layout(tmp_path / "layout", [layer.getvalue()])
    with pytest.raises(ImageError, match=r"the layer's entry 'etc/x' has the modification time .*: refused"):
        ImageStore(tmp_path / "store").import_layout(layout)


@pytest.mark.parametrize(
    ("malformed", "said"),
    [
        ({"index_manifests": [1]}, "index.json: an entry of its manifests is 1, not a JSON object"),
        ({"index_manifests": {"a": 1}}, 'index.json: its manifests is {"a": 1}, not a JSON array'),
        ({"index_manifests": [{"platform": "linux/amd64"}]}, 'a platform is "linux/amd64", not a JSON object'),
        ({"config": ["Env"]}, 'its config is ["Env"], not a JSON object'),
        ({"image_config": {"rootfs": "layers"}}, 'its rootfs is "layers", not a JSON object'),
        ({"image_config": {"rootfs": {"diff_ids": "x"}}}, 'its diff_ids is "x", not a JSON array'),
    ],
)
def test_a_digest_valid_but_malformed_image_is_one_image_error(
    tmp_path: Path, malformed: dict[str, object], said: str
) -> None:
    layout = write_layout(tmp_path / "layout", [tar_layer([Entry("etc", "dir")])], **malformed)  # type: ignore[arg-type]
    with pytest.raises(ImageError) as caught:
        ImageStore(tmp_path / "store").import_layout(layout)
    assert said in str(caught.value) and "a malformed image; save it again" in str(caught.value)


def test_an_image_of_another_platform_is_refused_at_import(tmp_path: Path) -> None:
    layout = write_layout(
        tmp_path / "layout", [tar_layer([Entry("etc", "dir")])], image_config={"architecture": OTHER_ARCH}
    )
    with pytest.raises(
        ImageError, match=rf"is for linux/{OTHER_ARCH}, not this machine's {this_platform()}: its programs cannot run"
    ):
        ImageStore(tmp_path / "store").import_layout(layout)
    with pytest.raises(ImageError, match=rf"is for windows/{ARCH}, not this machine's {this_platform()}"):
        ImageStore(tmp_path / "store").import_archive(
            oci_archive(write_layout(tmp_path / "windows", [], image_config={"os": "windows"}), tmp_path / "w.tar")
        )


def test_a_platform_matches_by_os_architecture_and_variant_never_by_prefix(tmp_path: Path) -> None:
    assert same_platform("linux/arm64", "linux/arm64") and same_platform("linux/arm/v7", "linux/arm")
    assert not same_platform("linux/arm64", "linux/arm") and not same_platform("linux/arm/v6", "linux/arm/v7")
    longer = {"os": "linux", "architecture": this_platform().split("/")[1] + "x"}  # this one's name and more
    layout = write_layout(tmp_path / "layout", [tar_layer([Entry("etc", "dir")])])
    index = json.loads((layout / "index.json").read_text())
    index["manifests"][0]["platform"] = longer
    (layout / "index.json").write_text(json.dumps(index))
    with pytest.raises(
        ImageError, match=rf"has no image for {this_platform()} \(it has linux/{longer['architecture']}\)"
    ):
        ImageStore(tmp_path / "store").import_layout(layout)


def test_an_absolute_name_is_contained_in_the_image(tmp_path: Path) -> None:
    root = _import(tmp_path, [Entry("/abs-pwned", data=b"x")])
    assert (root / "abs-pwned").read_bytes() == b"x"
    assert not Path("/abs-pwned").exists()


@pytest.mark.parametrize("target", ["/", "..", "../../..", "/tmp"])
def test_nothing_is_written_through_a_symlink_the_layer_made(tmp_path: Path, target: str) -> None:
    with pytest.raises(ImageError, match="nothing is written through a link"):
        _import(tmp_path, [Entry("escape", "symlink", target=target), Entry("escape/pwned", data=b"x")])
    assert not Path("/pwned").exists() and not Path("/tmp/pwned").exists() and not list(tmp_path.rglob("pwned"))


@pytest.mark.parametrize("target", ["/etc/passwd", "../../../../etc/passwd", "missing", "dir"])
def test_a_hard_link_out_of_the_tree_is_refused(tmp_path: Path, target: str) -> None:
    before = os.stat("/etc/passwd").st_nlink
    with pytest.raises(ImageError, match="hard link"):
        _import(tmp_path, [Entry("dir", "dir"), Entry("stolen", "hardlink", target=target)])
    assert os.stat("/etc/passwd").st_nlink == before


def test_a_hard_link_through_a_symlink_the_layer_made_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("untouched\n")
    with pytest.raises(ImageError, match="nothing is written through a link"):
        _import(tmp_path, [Entry("a", "symlink", target=str(outside)), Entry("stolen", "hardlink", target="a/victim")])
    assert os.stat(outside / "victim").st_nlink == 1


def test_a_device_node_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="device node 'usr/mem'"):
        _import(tmp_path, [Entry("usr", "dir"), Entry("usr/mem", "chr")])
    with pytest.raises(ImageError, match="device node"):
        _import(tmp_path, [Entry("disk", "blk")])


def test_device_nodes_under_dev_are_dropped_and_fifos_kept(tmp_path: Path) -> None:
    root = _import(tmp_path, [Entry("dev", "dir"), Entry("dev/null", "chr"), Entry("pipe", "fifo", mode=0o600)])
    assert not (root / "dev" / "null").exists()
    assert stat.S_ISFIFO(os.lstat(root / "pipe").st_mode)


def test_doctor_names_each_image_by_digest_and_a_missing_root(tmp_path: Path) -> None:
    from rollbox.sandbox._doctor import _image_checks

    store = ImageStore(tmp_path / "store")
    image = store.import_layout(image_layout(tmp_path), ref="doctor/test:1")
    checks = {c.name: c for c in _image_checks(store)}
    assert checks["images"].detail.startswith("1 in ")
    assert checks[f"image {image.short}"].ok and image.digest in checks[f"image {image.short}"].detail
    assert "doctor/test:1" in checks[f"image {image.short}"].detail
    shutil.rmtree(image.root)
    broken = {c.name: c for c in _image_checks(store)}[f"image {image.short}"]
    assert not broken.ok and broken.fix is not None and "doctor/test:1" in broken.fix


@pytest.mark.skipif(not (shutil.which("umoci") and shutil.which("skopeo")), reason="needs umoci and skopeo")
def test_images_made_by_umoci_and_saved_by_skopeo_are_imported(tmp_path: Path) -> None:
    # A layout as umoci makes it (a layer that adds, then one that deletes: a whiteout), and the docker-save archive
    # skopeo writes of it (its layer.tar a link to a file of the archive).
    def umoci(*args: str) -> None:
        subprocess.run(["umoci", *args], check=True, capture_output=True, cwd=tmp_path)

    umoci("init", "--layout", "img")
    umoci("new", "--image", "img:t")
    umoci("unpack", "--image", "img:t", "bundle")
    data = tmp_path / "bundle" / "rootfs" / "data"
    data.mkdir()
    (data / "kept").write_text("kept\n")
    (data / "gone").write_text("gone\n")
    umoci("repack", "--image", "img:t", "bundle")
    (data / "gone").unlink()
    umoci("repack", "--image", "img:t", "bundle")
    umoci("config", "--image", "img:t", "--config.env", "FOO=bar", "--config.workingdir", "/data")
    archive = tmp_path / "saved.tar"
    subprocess.run(
        ["skopeo", "copy", "-q", "oci:img:t", f"docker-archive:{archive}:test/umoci:1"],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    store = ImageStore(tmp_path / "store")
    layout = store.import_layout(tmp_path / "img")
    saved = store.import_archive(archive)
    for image in (layout, saved):
        assert sorted(os.listdir(image.root / "data")) == ["kept"]
        assert image.config.env == (("FOO", "bar"),) and image.config.working_dir == "/data"
    assert layout.refs == () and saved.refs == ("docker.io/test/umoci:1",)  # whole references only: "t" is a tag
    assert store.resolve("test/umoci:1") == store.resolve("docker.io/test/umoci:1") == saved


def test_imports_at_once_of_one_image_unpack_it_once(tmp_path: Path) -> None:
    layout = image_layout(tmp_path)
    store = ImageStore(tmp_path / "store")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        images = list(pool.map(lambda ref: store.import_layout(layout, ref=ref), ["a:1", "b:1", "c:1", "d:1"]))
    assert len({i.digest for i in images}) == 1
    assert sorted(store.resolve(images[0].digest).refs) == ["a:1", "b:1", "c:1", "d:1"]
    assert len([p for p in (tmp_path / "store" / "roots").iterdir() if p.is_dir()]) == 1
