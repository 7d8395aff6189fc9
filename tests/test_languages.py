"""Every language of the table through ``/run_code``, each in an image built from the recipes (one image of all the
recipes together, built once and cached across sessions): a program that reads stdin runs, and one that does not
compile is reported as SandboxFusion reports it. SandboxFusion's own client (``sandbox-fusion`` from PyPI) sends the
requests for the languages it knows; ``c``, ``D`` and ``kotlin``, which it does not name, go in its HTTP shape."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from image_builds import cached_build, need_mmdebstrap
from language_programs import PROGRAMS
from rollbox.sandbox.images import ImageStore
from rollbox.sandbox.images._languages import LANGUAGES
from rollbox.sandbox.images._recipe import combined_recipe, load_recipe, recipe_names
from rollbox.server import ServerConfig
from serving import Running, running

sandbox_fusion = pytest.importorskip("sandbox_fusion")
# The first test builds the image of every language (about 3 minutes on two cores with an empty build cache, more
# beside other work), within its own time: each test's timeout counts the module's fixtures it sets up.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: The name the tests import the image of all the recipes as.
REF = "rollbox/languages:test"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    layout = cached_build(combined_recipe("languages", [load_recipe(n) for n in recipe_names()]))
    ImageStore().import_layout(layout, ref=REF)  # the session's ROLLBOX_HOME: the service's and the judge's store
    tasks = tmp_path_factory.mktemp("tasks")
    _java_task(tasks / "sum-java")
    config = ServerConfig(language_images=REF, tasks_dir=tasks, pool_size=1, max_timeout_s=120.0)
    with running(config) as r:
        yield r


def _java_task(root: Path) -> None:
    """A stdio task in Java on the languages' image, for ``/submit``."""
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "Main.java").write_text("public class Main { public static void main(String[] a) {} }\n")
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text('{"input": "3 4\\n", "output": "7\\n"}\n')
    (root / "instruction.md").write_text("Print the sum of the two integers on stdin, in Java.\n")
    command = "sh -c 'javac -d /tmp/classes Main.java && java -cp /tmp/classes Main'"
    (root / "task.toml").write_text(
        f'id = "sum-java"\n[grading]\nrunner = "stdio"\ncommand = "{command}"\n'
        '[limits]\ntimeout = "60s"\ncpu_time = "60s"\nmemory = "2G"\npids = 512\n'
        f'[environment]\nimage = "{REF}"\n'
    )


@pytest.fixture
def http(server: Running) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=300) as client:
        yield client


def _run(server: Running, http: httpx.Client, language: str, code: str) -> dict[str, Any]:
    """What ``/run_code`` answers, through SandboxFusion's client where it knows the language."""
    lang = LANGUAGES[language]  # its own timeouts: SandboxFusion's client always sends its defaults (10 s)
    fields = {"code": code, "language": language, "stdin": "3 4\n", "compile_timeout": lang.compile_timeout_s}
    fields["run_timeout"] = lang.run_timeout_s
    if language in sandbox_fusion.models.Language.__args__:
        response = sandbox_fusion.run_code(sandbox_fusion.RunCodeRequest(**fields), endpoint=server.url, max_attempts=1)
        return response.dict()  # type: ignore[no-any-return]
    answer = http.post("/run_code", json=fields)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def _status(value: object) -> str:
    return str(getattr(value, "value", value))


@pytest.mark.parametrize("language", sorted(PROGRAMS))
def test_a_program_runs_and_reads_stdin_and_a_compile_error_is_reported(
    server: Running, http: httpx.Client, language: str
) -> None:
    good, bad = PROGRAMS[language]
    lang = LANGUAGES[language]
    ran = _run(server, http, language, good)
    assert _status(ran["status"]) == "Success", ran
    out = ran["run_result"]
    assert _status(out["status"]) == "Finished" and out["return_code"] == 0
    if language == "pytest":
        assert "1 passed" in out["stdout"]
    elif language == "D_ut":
        assert "passed unittests" in out["stderr"]
    else:
        assert out["stdout"] == "7\n", out
    if lang.compile is not None:
        assert ran["compile_result"]["return_code"] == 0

    broken = _run(server, http, language, bad)
    assert _status(broken["status"]) == "Failed", broken
    if lang.compile is not None:  # SandboxFusion's compile error: the compile's result, and no run at all
        compiled = broken["compile_result"]
        assert _status(compiled["status"]) == "Finished" and compiled["return_code"] != 0
        assert (compiled["stderr"] + compiled["stdout"]).strip()  # tsc reports on stdout
        assert broken["run_result"] is None
    else:  # no compile step: the interpreter refuses it, and says why
        assert broken["compile_result"] is None
        refused = broken["run_result"]
        assert refused["return_code"] != 0 and (refused["stderr"] + refused["stdout"]).strip()  # pytest: stdout


def test_languages_lists_every_language_and_says_which_debian_lacks(http: httpx.Client) -> None:
    rows = {row["name"]: row for row in http.get("/v1/languages").json()}
    assert set(rows) == set(LANGUAGES)
    for name in ("julia", "swift", "lean"):
        assert rows[name]["available"] is False and rows[name]["image"] is None
        assert "Debian bookworm does not package" in rows[name]["reason"]
    runnable = {name for name, row in rows.items() if row["available"]}
    assert runnable == set(LANGUAGES) - {"julia", "swift", "lean"}
    assert rows["java"]["image"] == REF and rows["java"]["compile"] == ["javac", "Main.java"]
    refused = http.post("/run_code", json={"code": "println(1)", "language": "julia"})
    assert refused.status_code == 400 and "Debian bookworm does not package Julia" in refused.text


def test_a_language_gets_its_limits_and_a_request_overrides_them(server: Running, http: httpx.Client) -> None:
    threads = (
        "public class Main { public static void main(String[] a) {"
        " System.out.println(Thread.getAllStackTraces().size() > 0);"
        " System.out.println(Runtime.getRuntime().maxMemory() > 256L * 1024 * 1024); } }\n"
    )
    body = http.post("/run_code", json={"code": threads, "language": "java"}).json()
    assert body["status"] == "Success" and body["run_result"]["stdout"] == "true\ntrue\n", body
    # The request's own memory limit wins over the language's: a JVM does not start in 16 MiB.
    starved = http.post("/run_code", json={"code": threads, "language": "java", "memory_limit_MB": 16}).json()
    assert starved["status"] == "Failed"


def test_files_are_fetched_after_a_compile_error_as_sandboxfusion_does(http: httpx.Client) -> None:
    kept = base64.b64encode(b"notes").decode()
    request = {"code": "int main( {", "language": "cpp", "files": {"notes.txt": kept}, "fetch_files": ["notes.txt"]}
    body = http.post("/run_code", json=request).json()
    assert body["status"] == "Failed" and body["run_result"] is None and body["compile_result"]["return_code"] != 0
    assert body["files"] == {"notes.txt": kept}


def test_an_image_that_cannot_be_built_is_a_sandbox_error_never_a_failed_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_mmdebstrap()
    # A mirror nothing listens on: mmdebstrap fails at once. That is the service's fault, not the program's.
    monkeypatch.setenv("ROLLBOX_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")
    config = ServerConfig(home=tmp_path, language_images="recipes", pool_size=1)
    with running(config) as r, httpx.Client(base_url=r.url, timeout=300) as http:
        body = http.post("/run_code", json={"code": "print(1)", "language": "lua"}).json()
    assert body["status"] == "SandboxError", body
    assert "mmdebstrap failed building recipe lua" in body["message"] and "127.0.0.1:9" in body["message"]


def test_submit_grades_a_java_completion_on_the_tasks_image(http: httpx.Client) -> None:
    good, bad = PROGRAMS["java"]
    for completion, accepted in ((f"```java\n{good}```", True), (f"```java\n{bad}```", False)):
        request = {"dataset": "tasks", "id": "sum-java", "completion": completion}
        request["config"] = {"language": "java", "extra": {"path": "Main.java"}}
        body = http.post("/submit", json=request).json()
        assert body["accepted"] is accepted, body
        assert body["extracted_code"] == (good if accepted else bad)
