"""Whatever file is given as an image archive, its import ends in one ``ImageError`` of one line that says what
is wrong and what to do: not a tar archive at all, a damaged one (a byte flipped, cut short; plain, gzip, bzip2 or
xz), never tarfile's several-line complaint or another exception. ``ImageError`` itself keeps to one line whatever
it quotes."""

from __future__ import annotations

import bz2
import gzip
import lzma
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oci_images import Entry, docker_archive, tar_layer
from rollbox.sandbox.images import ImageError, ImageStore

#: How an archive may come: as written, or compressed (tarfile opens each with mode "r:*").
COMPRESSIONS: dict[str, Callable[[bytes], bytes]] = {
    "plain": lambda data: data,
    "gzip": lambda data: gzip.compress(data, mtime=0),
    "bzip2": bz2.compress,
    "xz": lzma.compress,
}


def saved(tmp: Path) -> bytes:
    layer = tar_layer([Entry("bin", "dir", mode=0o755), Entry("bin/tool", data=b"tool\n" * 200, mode=0o755)])
    return docker_archive(tmp / "saved.tar", [layer]).read_bytes()


@pytest.fixture(scope="module")
def archive_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return saved(tmp_path_factory.mktemp("saved"))


def import_error(tmp: Path, data: bytes) -> str | None:
    """The message of importing ``data`` as an archive, or None when it imported."""
    (tmp / "given.tar").write_bytes(data)
    try:
        ImageStore(tmp / "store").import_archive(tmp / "given.tar")
    except ImageError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"", "is not a tar archive (plain, gzip, bzip2 or xz): give a docker-save or OCI archive"),
        (b"hello", "is not a tar archive"),
        (bytes(range(256)) * 16, "is not a tar archive"),
        (gzip.compress(b"not a tar" * 100), "is a gzip file without a readable tar archive in it"),
    ],
)
def test_not_an_archive_is_one_line_saying_what_to_give(tmp_path: Path, data: bytes, said: str) -> None:
    message = import_error(tmp_path, data)
    assert message is not None and said in message and "\n" not in message, message


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_an_archive_cut_short_is_one_line_saying_to_save_it_again(
    tmp_path: Path, archive_bytes: bytes, compression: str
) -> None:
    data = COMPRESSIONS[compression](archive_bytes)
    message = import_error(tmp_path, data[: len(data) // 3])  # inside the files (tar pads its end with zeros)
    assert message is not None and "\n" not in message, message
    assert "save or copy the image again" in message, message


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    compression=st.sampled_from(sorted(COMPRESSIONS)),
    cut=st.floats(0.0, 1.0),
    flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 255)), max_size=4),
)
def test_a_damaged_archive_is_one_image_error_of_one_line(
    archive_bytes: bytes, compression: str, cut: float, flips: list[tuple[float, int]]
) -> None:
    data = bytearray(COMPRESSIONS[compression](archive_bytes))
    for where, mask in flips:
        data[int(where * (len(data) - 1))] ^= mask
    data = data[: int(len(data) * cut)] if cut < 1.0 else data
    tmp = Path(tempfile.mkdtemp(prefix="rollbox-archive-"))
    try:
        message = import_error(tmp, bytes(data))  # any other exception fails the test
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert message is None or ("\n" not in message and message.strip() == message and message), message


@given(st.text())
def test_an_image_error_is_one_line_whatever_it_quotes(quoted: str) -> None:
    message = str(ImageError(f"cannot import x ({quoted}): do y"))
    assert "\n" not in message and "\r" not in message
    assert message.startswith("cannot import x") and message.endswith("do y")


@pytest.mark.parametrize(
    "clash",
    [
        [("a", "file", ""), ("b", "file", ""), ("a", "symlink", "b")],  # a file, then a link of the same name
        [("a", "file", ""), ("a/b", "file", "")],  # a file, then an entry below it
        [("a/b", "file", ""), ("a", "file", "")],  # a directory, then a file of its name
    ],
)
def test_two_entries_of_one_name_are_one_image_error_saying_so(
    tmp_path: Path, clash: list[tuple[str, str, str]]
) -> None:
    said = import_error(
        tmp_path, tar_layer([Entry(name, kind, data=b"x", target=target) for name, kind, target in clash])
    )
    assert said is not None and "holds two entries of one name at 'a'" in said and "save the image again" in said, said
