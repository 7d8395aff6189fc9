"""The library search path an interpreter binary carries (``DT_RUNPATH``), read and rewritten in place.

A Python built with ``--enable-shared`` (pyenv's, a CI runner's) finds ``libpython`` through a run path written
into its binary at build time, an absolute path under its prefix: moved elsewhere (a sandbox mounts it at
``/opt/rollbox/python``), it cannot start. Its copy with the run path ``$ORIGIN/../lib`` (the binary's own
``../lib``, as relocatable builds carry) starts wherever its prefix is mounted. The new path is written over the
old one in the string table, padded with NULs, as patchelf does when the new path is no longer: nothing else in
the file moves.
"""

from __future__ import annotations

import struct
from pathlib import Path

__all__ = ["RELOCATABLE_RUNPATH", "read_runpath", "with_runpath"]

#: The run path of a binary that finds its libraries in its own prefix, wherever that is.
RELOCATABLE_RUNPATH = "$ORIGIN/../lib"

_DT_NULL, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 5, 15, 29
_PT_LOAD, _PT_DYNAMIC = 1, 2


def _runpath_offset(data: bytes) -> tuple[int, int] | None:
    """(file offset, length) of the binary's run path string (DT_RUNPATH, else DT_RPATH), or None without one.

    Raises:
        ValueError: not a 64-bit little-endian ELF file (the only kind rollbox runs on: x86_64, aarch64).
    """
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF binary")
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, size in the file)
    dynamic: tuple[int, int] | None = None
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return None  # a static binary: it loads no library
    strtab = path_at = None
    for offset in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, offset)
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = value
        elif tag == _DT_RUNPATH or (tag == _DT_RPATH and path_at is None):
            path_at = value
    if strtab is None or path_at is None:
        return None
    for vaddr, offset, size in loads:
        if vaddr <= strtab < vaddr + size:
            start = strtab - vaddr + offset + path_at
            return start, data.index(b"\0", start) - start
    raise ValueError("the dynamic string table lies in no loaded segment")


def read_runpath(binary: Path) -> str | None:
    """The run path ``binary`` carries, or None.

    Raises:
        ValueError: ``binary`` is not a 64-bit little-endian ELF file.
        OSError: it cannot be read.
    """
    data = binary.read_bytes()
    found = _runpath_offset(data)
    return None if found is None else data[found[0] : found[0] + found[1]].decode()


def with_runpath(binary: Path, runpath: str) -> bytes:
    """The bytes of ``binary`` with its run path replaced by ``runpath``.

    Raises:
        ValueError: it carries no run path, or one shorter than ``runpath`` (there is no room to write it).
    """
    data = bytearray(binary.read_bytes())
    found = _runpath_offset(bytes(data))
    new = runpath.encode()
    if found is None or found[1] < len(new):
        raise ValueError(f"{binary} has no run path of at least {len(new)} bytes to rewrite")
    start, length = found
    data[start : start + length] = new + b"\0" * (length - len(new))
    return bytes(data)
