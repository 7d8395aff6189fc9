"""Tasks on images, for real: ``[environment] image = ...`` (a store reference, or a layout next to the task) runs
the task's grading and its episodes on that image's root, and the verdict and the trajectory name its digest."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

import rollbox
from oci_images import Entry, host_files_layer, host_image, tar_layer, write_layout
from rollbox import telemetry
from rollbox.judge import VerdictStatus, grade, task_image
from rollbox.sandbox.images import ImageError, ImageStore
from rollbox.tasks import Task, import_tasks, load_task, write_task

if os.geteuid() != 0:
    pytest.skip("images run in the namespaces backend, which needs root", allow_module_level=True)

#: Passes only where the image's configuration applies and the host's files are out of sight.
ON_THE_IMAGE = (
    "import os, sys\n"
    "on_image = os.environ.get('IMAGE_VARIABLE') == 'from-the-image' and not os.path.exists('/work')\n"
    "print(sum(int(x) for x in sys.stdin.read().split()) if on_image else 'on the host')\n"
)
CASES = '{"input": "1 2\\n", "output": "3\\n"}\n{"input": "40 2\\n", "output": "42\\n"}\n'


def stdio_task(root: Path, image: str) -> Task:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "solution.py").write_text("print('todo')\n")
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text(CASES)
    (root / "instruction.md").write_text("Print the sum of the numbers on stdin.\n")
    (root / "task.toml").write_text(
        'id = "sum-on-image"\n[grading]\nrunner = "stdio"\ncommand = "python3 solution.py"\n'
        f'[limits]\ntimeout = "10s"\nmemory = "256M"\n[environment]\nimage = "{image}"\n'
    )
    return load_task(root)


def test_grading_runs_on_the_image_a_store_reference_names(tmp_path: Path) -> None:
    image = host_image()
    task = stdio_task(tmp_path / "task", "rollbox-test/host:1")
    assert task.environment.image == "rollbox-test/host:1"
    verdict = asyncio.run(grade(task, {"solution.py": ON_THE_IMAGE}))
    assert verdict.status is VerdictStatus.PASSED, verdict
    assert verdict.image == image.digest and verdict.to_json()["image"] == image.digest


def test_a_layout_next_to_the_task_is_imported_and_graded_on(tmp_path: Path) -> None:
    layout = write_layout(
        tmp_path / "images" / "sum",
        [host_files_layer(), tar_layer([Entry("etc", "dir", mode=0o755), Entry("etc/marker", data=b"layout\n")])],
        config={"Env": ["IMAGE_VARIABLE=from-the-image"]},
        compress=False,
    )
    task = stdio_task(tmp_path / "task", "../images/sum")
    marker = ON_THE_IMAGE.replace("on_image = ", "on_image = open('/etc/marker').read() == 'layout\\n' and ")
    verdict = asyncio.run(grade(task, {"solution.py": marker}))
    assert verdict.status is VerdictStatus.PASSED, verdict
    assert verdict.image is not None and verdict.image != host_image().digest
    assert rollbox.sandbox.images.ImageStore().resolve(verdict.image).digest == verdict.image
    shutil.rmtree(layout)


def test_the_host_root_is_not_the_image_root(tmp_path: Path) -> None:
    # The same candidate on a task without an image: the host's files are there, the image's variable is not.
    task = stdio_task(tmp_path / "task", "rollbox-test/host:1")
    (task.path / "task.toml").write_text((task.path / "task.toml").read_text().split("[environment]")[0])
    verdict = asyncio.run(grade(load_task(task.path), {"solution.py": ON_THE_IMAGE}))
    assert verdict.status is VerdictStatus.FAILED and verdict.image is None


def test_an_unknown_image_is_infra_error_saying_what_to_do(tmp_path: Path) -> None:
    task = stdio_task(tmp_path / "task", "nowhere/none:1")
    verdict = asyncio.run(grade(task, {"solution.py": ON_THE_IMAGE}))
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None
    assert verdict.error is not None and "no image 'nowhere/none:1'" in verdict.error and "import" in verdict.error


def test_a_layout_changed_in_place_or_collected_is_imported_again(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    layout = write_layout(tmp_path / "task" / "image", [tar_layer([Entry("etc", "dir"), Entry("etc/v", data=b"1")])])
    task = stdio_task(tmp_path / "task", "image")
    first = task_image(task, store)
    assert (
        first is not None and first.digest == json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]
    )
    # A new image's blobs copied in and index.json rewritten in place, as cp or an editor does: the directory keeps
    # its inode (and, often, its time), only the digest index.json names tells the images apart.
    write_layout(tmp_path / "other", [tar_layer([Entry("etc", "dir"), Entry("etc/v", data=b"2")])])
    for blob in (tmp_path / "other" / "blobs" / "sha256").iterdir():
        shutil.copy(blob, layout / "blobs" / "sha256" / blob.name)
    with (layout / "index.json").open("r+") as index:
        index.truncate()
        index.write((tmp_path / "other" / "index.json").read_text())
    second = task_image(task, store)
    assert second is not None and second.digest != first.digest and (second.root / "etc" / "v").read_text() == "2"
    store.remove(second.digest)
    store.gc()  # its root is gone: the image is imported again, not handed out without one
    third = task_image(task, store)
    assert third is not None and third.digest == second.digest and third.root.is_dir()


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_an_index_json_that_is_no_regular_file_is_refused_at_once_never_waited_on_or_read_whole(
    tmp_path: Path, kind: str
) -> None:
    image = tmp_path / "task" / "image"
    image.mkdir(parents=True)
    (image / "oci-layout").write_text("{}")
    if kind == "fifo":
        os.mkfifo(image / "index.json")  # opened for reading as a file is, it waits for a writer for ever
    else:
        # A link to a file of 256 MiB (a link to /dev/zero would be read without end): never followed, never read.
        with (tmp_path / "big").open("wb") as big:
            big.truncate(256 << 20)
        (image / "index.json").symlink_to(tmp_path / "big")
    task = stdio_task(tmp_path / "task", "image")
    outcome: list[BaseException | None] = []

    def look() -> None:
        try:
            task_image(task, ImageStore(tmp_path / "store"))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=look, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(10)
    if thread.is_alive() and kind == "fifo":
        os.close(os.open(image / "index.json", os.O_WRONLY | os.O_NONBLOCK))  # the waiting reader let go
        thread.join(10)
    assert outcome and time.monotonic() - started < 5, "waited on index.json"
    assert isinstance(outcome[0], ImageError), outcome
    said = "not a regular file" if kind == "fifo" else "index.json: a link"
    assert said in str(outcome[0]) and "index.json is a regular file" in str(outcome[0]), outcome[0]


def test_a_root_being_collected_while_a_task_looks_for_its_image_is_imported_again_not_an_oserror(
    tmp_path: Path,
) -> None:
    store = ImageStore(tmp_path / "store")
    write_layout(tmp_path / "task" / "image", [tar_layer([Entry("etc", "dir"), Entry("etc/v", data=b"1")])])
    task = stdio_task(tmp_path / "task", "image")
    first = task_image(task, store)
    assert first is not None
    with open(first.root.parent / f"{first.root_id}.lock", "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as gc holds it while it removes the root
        again = task_image(task, store)  # the cached image cannot be held now: looked up again, never BlockingIOError
    assert again is not None and again.digest == first.digest


def test_a_full_disk_under_the_image_store_is_infra_error_never_the_candidates(
    tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLBOX_HOME", str(small_disk))
    # A configuration of 1.5 MB: the store's record of the image (which keeps it) cannot be written.
    layout = write_layout(tmp_path / "image", [tar_layer([Entry("etc", "dir")])], config={"Pad": "x" * 1_500_000})
    (small_disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - (512 << 10)))
    verdict = asyncio.run(grade(stdio_task(tmp_path / "task", str(layout)), {"solution.py": ON_THE_IMAGE}))
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None, verdict
    assert f"free space under {small_disk / 'images'}" in str(verdict.error), verdict.error
    with pytest.raises(ImageError, match="No space left on device"):
        ImageStore().import_layout(layout)


def test_an_episode_runs_on_the_image_and_its_trajectory_names_the_digest(tmp_path: Path) -> None:
    image = host_image()
    task = stdio_task(tmp_path / "task", "rollbox-test/host:1")

    async def play() -> rollbox.env.Episode:
        async with rollbox.make(task) as env:
            await env.reset()
            probe = await env.step({"name": "bash", "arguments": {"command": "cat /etc/passwd; ls /work || true"}})
            assert "sandbox:x:1000" in probe.observation.text and "No such file" in probe.observation.text
            await env.step({"name": "write_file", "arguments": {"path": "solution.py", "content": ON_THE_IMAGE}})
            last = await env.step({"name": "submit", "arguments": {}})
            assert last.done and last.reward == 1.0, last.info
        return env

    events: list[telemetry.Event] = []

    class Sink:
        def write(self, event: telemetry.Event) -> None:
            events.append(event)

    with telemetry.recording(Sink()):
        env = asyncio.run(play())
    (end,) = [e for e in events if e.kind == "episode.end"]
    assert end.fields["image"] == image.digest  # the archive keeps it with the episode's end
    assert env.trajectory.image == image.digest
    assert env.trajectory.to_json()["verdict"]["image"] == image.digest


def test_the_image_survives_writing_the_task_back(tmp_path: Path) -> None:
    task = stdio_task(tmp_path / "task", "rollbox-test/host:1")
    out = Path(tempfile.mkdtemp(dir=tmp_path))
    written = write_task(
        out / "copy", task_id=task.id, grading=task.grading, environment=task.environment, tests={"cases.jsonl": CASES}
    )
    assert written.environment.image == "rollbox-test/host:1"


def test_the_swebench_importer_targets_an_image_per_instance(tmp_path: Path) -> None:
    from test_import_swebench import instance, make_calc_repo

    repo = make_calc_repo(tmp_path / "repos" / "acme__calc")
    source = tmp_path / "instances.jsonl"
    source.write_text(json.dumps(instance(repo)) + "\n")
    report = import_tasks(
        "swebench", source, tmp_path / "tasks", repos=repo.path.parent, image="rollbox-test/{repo}:{version}"
    )
    assert not report.refused, report.refused
    task = load_task(tmp_path / "tasks" / "acme__calc-1")
    assert task.environment.image == "rollbox-test/acme__calc:1.0"
    assert task.environment.requirements == () and task.environment.is_default  # no layer: the image has it all
    # Without the option, the uv layer of the instance's requirements, as before.
    plain = import_tasks("swebench", source, tmp_path / "plain", repos=repo.path.parent)
    assert not plain.refused
    assert load_task(tmp_path / "plain" / "acme__calc-1").environment.requirements == ("pytest>=7",)
    with pytest.raises(ValueError, match="swebench only"):
        import_tasks("stdio", source, tmp_path / "x", image="x")


def test_the_schedulers_pool_of_an_image_task_is_named_by_the_images_digest(tmp_path: Path) -> None:
    from rollbox.scheduler._grade_kind import task_pool

    image = host_image()
    assert json.loads(task_pool(stdio_task(tmp_path / "a", "rollbox-test/host:1")))["image"] == image.digest
    assert "image" not in json.loads(task_pool(stdio_task(tmp_path / "b", "nowhere/none:1")))  # the job says why
