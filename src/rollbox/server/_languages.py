"""The languages ``/run_code`` runs, as SandboxFusion names them, and how each is compiled and run.

Each is offered only where this machine has its toolchain (checked once, at the service's start): a program runs
inside the sandbox's read-only view of the host's ``/usr``, so the toolchain must be installed there, and must need
nothing of ``/etc``, which the sandbox does not see (Debian's JDK reads its security settings there: no java).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

__all__ = ["LANGUAGES", "Language", "available_languages"]


@dataclass(frozen=True)
class Language:
    """How one language's code is written, compiled and run in the sandbox's /workspace."""

    name: str
    #: The file the code is written to.
    source: str
    #: The compile command, or ``None`` for interpreted languages.
    compile: tuple[str, ...] | None
    run: tuple[str, ...]
    #: Programs the toolchain needs on the host's PATH.
    needs: tuple[str, ...]
    #: Whether the run forks the sandbox's warm Python interpreter (``python3 FILE``).
    warm_python: bool = False


LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        Language("python", "main.py", None, ("python3", "main.py"), ("python3",), warm_python=True),
        Language(
            "pytest",
            "test_main.py",
            None,
            ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_main.py"),
            ("python3",),
        ),
        Language("bash", "main.sh", None, ("bash", "main.sh"), ("bash",)),
        Language("cpp", "main.cpp", ("g++", "-O2", "-std=c++17", "-o", "main", "main.cpp"), ("./main",), ("g++",)),
        Language("nodejs", "main.js", None, ("node", "main.js"), ("node",)),
    )
}


def available_languages() -> dict[str, Language]:
    """The languages whose toolchains this machine has."""
    return {name: lang for name, lang in LANGUAGES.items() if all(shutil.which(p) for p in lang.needs)}
