"""The languages rollbox runs one-shot programs in (SandboxFusion's ``/run_code``, ``rollbox exec --image``): each
one's source file, compile and run commands, the recipe of the image that holds its toolchain, and the limits it
needs by default.

Names are SandboxFusion's where it has the language (``R``, ``D_ut``); ``c`` and ``D`` are rollbox's own. A
language Debian does not package for this machine (julia, swift and lean on bookworm) is listed with why, never
run on something else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rollbox.sandbox._limits import Limits, MiB

__all__ = ["LANGUAGES", "Language"]

GiB = 1024 * MiB


@dataclass(frozen=True)
class Language:
    """How one language's program is written, compiled and run in the sandbox's /workspace.

    Attributes:
        name: The name a request gives (``language`` of ``/run_code``).
        source: The file the program is written to.
        run: The command that runs it (after the compile, when there is one).
        compile: The command that compiles it, or None. A non-zero exit is a compile error: the run is skipped.
        recipe: The shipped recipe whose image has the toolchain, or None where Debian does not package it.
        missing: Why the language cannot run here (with ``recipe`` None).
        host: Programs the host must have to run it without an image (the service's host mode).
        memory_bytes, pids, cpu_time_s: What the toolchain needs at least (a JVM's threads and heap, the Go
            toolchain's parallel compiles); a request's own memory limit still wins.
        compile_timeout_s, run_timeout_s: The defaults where a request gives none.
        warm_python: Whether the run forks the sandbox's warm Python interpreter (host mode only).
    """

    name: str
    source: str
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    recipe: str | None = None
    missing: str = ""
    host: tuple[str, ...] = ()
    memory_bytes: int = 512 * MiB
    pids: int = 64
    cpu_time_s: float = 10.0
    compile_timeout_s: float = 10.0
    run_timeout_s: float = 10.0
    warm_python: bool = False

    @property
    def available(self) -> bool:
        """Whether an image can hold it (Debian packages its toolchain)."""
        return self.recipe is not None

    def limits(self, base: Limits) -> Limits:
        """``base`` raised to what this language needs (never lowered)."""
        return replace(
            base,
            memory_bytes=max(base.memory_bytes, self.memory_bytes),
            pids=max(base.pids, self.pids),
            cpu_time_s=max(base.cpu_time_s, self.cpu_time_s),
        )


_NOT_PACKAGED = "Debian bookworm does not package {} for this machine (apt-cache policy {}: no candidate)"


def _jvm(name: str, source: str, run: tuple[str, ...], compile: tuple[str, ...], recipe: str) -> Language:
    """A language of the JVM: a JVM starts a few dozen threads (GC, JIT compilers) and reserves its heap up front,
    and its compilers (javac, kotlinc, scalac) take seconds of CPU to start."""
    return Language(
        name,
        source,
        run,
        compile,
        recipe,
        memory_bytes=2 * GiB,
        pids=512,
        cpu_time_s=60.0,
        compile_timeout_s=60.0,
        run_timeout_s=20.0,
    )


LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        Language("python", "main.py", ("python3", "main.py"), recipe="python", host=("python3",), warm_python=True),
        Language(
            "pytest",
            "test_main.py",
            ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_main.py"),
            recipe="python",
            host=("python3",),
        ),
        Language("bash", "main.sh", ("bash", "main.sh"), recipe="bash", host=("bash",)),
        Language(
            "c", "main.c", ("./main",), ("gcc", "-O2", "-std=gnu17", "-o", "main", "main.c", "-lm"), "c", host=("gcc",)
        ),
        Language(
            "cpp", "main.cpp", ("./main",), ("g++", "-O2", "-std=c++17", "-o", "main", "main.cpp"), "cpp", host=("g++",)
        ),
        _jvm("java", "Main.java", ("java", "-ea", "-cp", ".", "Main"), ("javac", "Main.java"), "java"),
        Language(
            "go",
            "main.go",
            ("./main",),
            ("go", "build", "-o", "main", "main.go"),
            "go",
            memory_bytes=1 * GiB,
            pids=256,
            cpu_time_s=60.0,
            compile_timeout_s=60.0,
        ),
        Language(
            "rust",
            "main.rs",
            ("./main",),
            ("rustc", "-O", "-o", "main", "main.rs"),
            "rust",
            cpu_time_s=30.0,
            compile_timeout_s=30.0,
            pids=128,
        ),
        Language("nodejs", "main.js", ("node", "main.js"), recipe="nodejs", host=("node",), pids=128),
        Language(
            "typescript",
            "main.ts",
            ("node", "build/main.js"),
            ("tsc", "--outDir", "build", "main.ts", "/usr/local/lib/rollbox/node-globals.d.ts"),
            "typescript",
            pids=128,
            cpu_time_s=30.0,
            compile_timeout_s=30.0,
        ),
        Language("ruby", "main.rb", ("ruby", "main.rb"), recipe="ruby"),
        Language("php", "main.php", ("php", "-f", "main.php"), recipe="php"),
        Language("lua", "main.lua", ("lua5.4", "main.lua"), recipe="lua"),
        Language("R", "main.R", ("Rscript", "main.R"), recipe="r", memory_bytes=1 * GiB),
        Language("perl", "main.pl", ("perl", "main.pl"), recipe="perl"),
        Language(
            "racket",
            "main.rkt",
            ("racket", "main.rkt"),
            recipe="racket",
            memory_bytes=1 * GiB,
            cpu_time_s=30.0,
            run_timeout_s=30.0,
        ),
        Language(
            "csharp",
            "main.cs",
            ("mono", "main.exe"),
            ("mcs", "-out:main.exe", "main.cs"),
            "csharp",
            pids=256,
            memory_bytes=1 * GiB,
            cpu_time_s=30.0,
            compile_timeout_s=30.0,
        ),
        _jvm(
            "kotlin",
            "main.kt",
            ("java", "-jar", "main.jar"),
            ("kotlinc", "main.kt", "-include-runtime", "-d", "main.jar"),
            "kotlin",
        ),
        _jvm("scala", "Main.scala", ("scala", "-cp", ".", "Main"), ("scalac", "-d", ".", "Main.scala"), "scala"),
        Language(
            "D",
            "main.d",
            ("./main",),
            ("gdc", "-O2", "-o", "main", "main.d"),
            "d",
            cpu_time_s=30.0,
            compile_timeout_s=30.0,
        ),
        Language(
            "D_ut",
            "main.d",
            ("./main",),
            ("gdc", "-funittest", "-o", "main", "main.d"),
            "d",
            cpu_time_s=30.0,
            compile_timeout_s=30.0,
        ),
        Language("julia", "main.jl", ("julia", "main.jl"), missing=_NOT_PACKAGED.format("Julia", "julia")),
        Language(
            "swift",
            "main.swift",
            ("./main",),
            ("swiftc", "-o", "main", "main.swift"),
            missing=_NOT_PACKAGED.format("the Swift compiler", "swiftlang") + "; its 'swift' is OpenStack's",
        ),
        Language(
            "lean",
            "main.lean",
            ("lean", "--run", "main.lean"),
            missing=_NOT_PACKAGED.format("Lean", "lean4") + "; its elan only downloads toolchains at run time",
        ),
    )
}
