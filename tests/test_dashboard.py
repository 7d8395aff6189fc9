"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) against a running service with real
work: what the page shows is what the API says. Leaves a screenshot to look at."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import httpx
import pytest

from rollbox.server import ServerConfig, TenantStore
from serving import double_task, running

#: Where the page's picture is left, to look at (ROLLBOX_SCREENSHOT; default: the system's temporary directory).
SCREENSHOT = Path(os.environ.get("ROLLBOX_SCREENSHOT", Path(tempfile.gettempdir()) / "rollbox-dashboard.png"))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium (scripts/setup installs Debian's)")
def test_dashboard_shows_what_the_api_says(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    key = TenantStore(tmp_path / "tenants.json").add_key("ops", admin=True)
    tasks = double_task(tmp_path)
    config = ServerConfig(home=tmp_path, auth=True, archive_url="", tick_s=0.2, pool_size=2, tasks_dir=tasks)
    with running(config) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        http.headers["Authorization"] = f"Bearer {key}"
        for i in range(6):
            http.post("/run_code", json={"code": f"print({i})", "language": "python"})
        http.post("/run_code", json={"code": "import sys; sys.exit('boom-on-stderr')", "language": "python"})
        http.post("/run_code", json={"code": "while True: pass", "language": "python", "run_timeout": 0.5})
        for body in ("return 2 * x", "return x", "return x + x"):
            files = {"solution.py": f"def double(x):\n    {body}\n"}
            assert http.post("/v1/grade", json={"task": "double", "files": files}).status_code == 200
        expected = http.get("/v1/stats").json()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1500})
                page.goto(f"{server.url}/dashboard?key={key}")
                page.wait_for_selector("body[data-loaded='1']", timeout=30_000)
                counts = {
                    name: page.text_content(f"svg[data-chart='executions'] [data-count='{name}']")
                    for name in expected["executions"]
                }
                assert counts == {name: str(n) for name, n in expected["executions"].items()}
                assert expected["executions"] == {"ok": 6, "nonzero_exit": 1, "timeout": 1}
                failures = page.locator("tr[data-failure]")
                assert failures.count() == len(expected["failures"]) == 3  # a timeout, an exit 1, a failed grading
                assert "boom-on-stderr" in page.text_content("#failures")
                assert page.text_content("#run") == f"run {expected['run']}"
                assert page.locator("[data-latency='exec']").count() == 1
                assert page.text_content("[data-alert]") is not None
                verdicts = page.text_content("svg[data-chart='verdicts'] [data-count='passed']")
                assert verdicts == str(expected["verdicts"]["passed"]) == "2"
                assert page.locator("#rewards polyline").count() == len(expected["rewards"]) == 1
                page.screenshot(path=str(SCREENSHOT), full_page=True)
                # Without the key, the page says why it shows nothing.
                anonymous = browser.new_page()
                anonymous.goto(f"{server.url}/dashboard")
                anonymous.wait_for_function("document.getElementById('error').textContent.length > 0")
                assert "API key" in anonymous.text_content("#error")
            finally:
                browser.close()
