"""The example task sets beyond Python code, graded for real with their references (pass) and wrong answers
(fail): a data-analysis task (a CSV and a question; the verifier checks the file produced) and an operations task
(a broken nginx configuration on an image with nginx installed; the verifier starts the service and checks it)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from image_builds import cached_build
from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.sandbox.images import ImageStore
from rollbox.sandbox.images._recipe import load_recipe
from rollbox.tasks import load_task

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ANALYSIS = EXAMPLES / "data-analysis" / "revenue-by-region"
OPERATIONS = EXAMPLES / "operations" / "nginx-static-site"


def _grade(task_dir: Path, files: dict[str, str]) -> Verdict:
    return asyncio.run(grade(load_task(task_dir), files))


def test_the_analysis_reference_passes_and_wrong_answers_fail() -> None:
    reference = (ANALYSIS / "solution" / "answer.json").read_text()
    verdict = _grade(ANALYSIS, {"answer.json": reference})
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    answer = json.loads(reference)
    # The classic slip: returned orders counted as revenue.
    with_returns = {"east": 888.71, "north": 632.85, "south": 1222.18, "west": 805.03}
    assert with_returns != answer["revenue_by_region"]
    wrong = {"revenue_by_region": with_returns, "top_region": "south"}
    for files in ({"answer.json": json.dumps(wrong)}, {}, {"answer.json": "south"}):
        verdict = _grade(ANALYSIS, files)
        assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, (files, verdict)
    # The agent's copy of the data is not what it is checked against: editing it to fit an answer does not pass.
    fitted = dict(answer, top_region="west")
    edited = (ANALYSIS / "workspace" / "data" / "orders.csv").read_text().replace(",west,", ",west,9")
    verdict = _grade(ANALYSIS, {"answer.json": json.dumps(fitted), "data/orders.csv": edited})
    assert verdict.status is VerdictStatus.FAILED, verdict


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="images run in the namespaces backend, which needs root")
def test_the_operations_reference_passes_and_broken_or_faked_configurations_fail() -> None:
    task = load_task(OPERATIONS)
    assert task.environment.image == "rollbox/ops-nginx:1"
    layout = cached_build(load_recipe(EXAMPLES / "operations" / "images" / "ops-nginx.toml"))
    image = ImageStore().import_layout(layout, ref="rollbox/ops-nginx:1")
    fixed = (OPERATIONS / "solution" / "nginx.conf").read_text()
    verdict = _grade(OPERATIONS, {"nginx.conf": fixed})
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    assert verdict.image == image.digest
    broken = (OPERATIONS / "workspace" / "nginx.conf").read_text()
    # As given (nginx does not start), half fixed (starts, serves the wrong root), and faked (answers what the
    # verifier might ask without serving the site).
    half = broken.replace("8080\n", "8080;\n").replace('"ok"\n', '"ok";\n')
    faked = half.replace("root /workspace/sites;", "location / { return 200 '<title>rollbox status</title>'; }")
    for conf in (broken, half, faked):
        assert conf != fixed
        verdict = _grade(OPERATIONS, {"nginx.conf": conf})
        assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict
