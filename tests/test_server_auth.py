"""Auth and tenants: keys stored hashed, every endpoint but health and metrics closed without one, one tenant
never sees or touches another's sandboxes or figures, rate limits and backpressure answered 429 + Retry-After."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from rollbox import telemetry
from rollbox.client import Client, ClientError
from rollbox.server import ServerConfig, TenantStore
from serving import Running, running


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    home = tmp_path_factory.mktemp("home")
    store = TenantStore(home / "tenants.json")
    made = {
        "a": store.add_key("team-a"),
        "b": store.add_key("team-b"),
        "slow": store.add_key("slow", rate_per_s=1, burst=2),
        "narrow": store.add_key("narrow", max_in_flight=1, max_sandboxes=1),
        "admin": store.add_key("ops", admin=True),
    }
    return home, made


#: The keys of the module's tenants, filled by the ``keys`` fixture.
KEYS: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _keys(keys: tuple[Path, dict[str, str]]) -> None:
    KEYS.update(keys[1])


@pytest.fixture(scope="module")
def server(keys: tuple[Path, dict[str, str]]) -> Iterator[Running]:
    with running(ServerConfig(home=keys[0], auth=True, pool_size=2)) as r:
        yield r


def client(server: Running, key: str | None) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {key}"} if key else {})


def within(seconds: float, check: Callable[[], bool]) -> bool:
    """Whether ``check`` holds within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_keys_are_stored_hashed(keys: tuple[Path, dict[str, str]]) -> None:
    home, made = keys
    text = (home / "tenants.json").read_text()
    assert all(key not in text for key in made.values())
    assert oct((home / "tenants.json").stat().st_mode & 0o777) == "0o600"
    assert json.loads(text)["tenants"]["ops"]["admin"] is True


def test_every_endpoint_but_health_and_metrics_needs_a_key(server: Running) -> None:
    with client(server, None) as anonymous, client(server, "rbx_wrong") as wrong:
        assert anonymous.get("/healthz").status_code == 200 and anonymous.get("/metrics").status_code == 200
        for http in (anonymous, wrong):
            for method, path in [
                ("POST", "/run_code"),
                ("GET", "/v1/stats"),
                ("POST", "/v1/sandboxes"),
                ("GET", "/v1/sandboxes"),
                ("POST", "/submit"),
                ("GET", "/v1/tasks"),
            ]:
                r = http.request(method, path, json={})
                assert r.status_code == 401 and "key" in r.json()["detail"], (method, path)
    with httpx.Client(base_url=server.url, headers={"X-API-Key": KEYS["a"]}) as other_header:
        assert other_header.get("/v1/sandboxes").status_code == 200
    body = {"code": "print(1)", "language": "python"}
    assert httpx.post(f"{server.url}/run_code?api_key={KEYS['a']}", json=body).json()["status"] == "Success"


def test_tenants_never_see_or_touch_each_others_sandboxes(server: Running) -> None:
    with client(server, KEYS["a"]) as a, client(server, KEYS["b"]) as b, client(server, KEYS["admin"]) as admin:
        sid = a.post("/v1/sandboxes", json={}).json()["id"]
        a.post(f"/v1/sandboxes/{sid}/exec", json={"argv": ["sh", "-c", "echo secret-of-a >&2; exit 1"]})
        for method, path, body in [
            ("GET", f"/v1/sandboxes/{sid}", None),
            ("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["cat", "/etc/hostname"]}),
            ("PUT", f"/v1/sandboxes/{sid}/files", {"path": "x", "content": "y"}),
            ("GET", f"/v1/sandboxes/{sid}/files?path=x", None),
            ("DELETE", f"/v1/sandboxes/{sid}", None),
        ]:
            assert b.request(method, path, json=body).status_code == 404, (method, path)
        assert b.get("/v1/sandboxes").json() == [] and [s["id"] for s in a.get("/v1/sandboxes").json()] == [sid]
        # Figures: each tenant sees its own failures only; an admin sees the service's, and alerts.
        assert "secret-of-a" not in b.get("/v1/stats").text
        assert "secret-of-a" in a.get("/v1/stats").text and "secret-of-a" in admin.get("/v1/stats").text
        assert b.get("/v1/stats", params={"of": "team-a"}).status_code == 403
        assert a.delete(f"/v1/sandboxes/{sid}").status_code == 204


def test_the_alerts_firing_are_shown_to_an_admin_only(server: Running) -> None:
    for _ in range(3):  # failed sandbox starts: RollboxSandboxStartFailures fires at the next evaluation
        telemetry.emit("sandbox.start", ok=False, wall_s=0.1, error="made by the test", tenant="team-b")
    with client(server, KEYS["a"]) as a, client(server, KEYS["admin"]) as admin:
        assert within(10, lambda: bool(admin.get("/v1/alerts").json()["firing"]))
        assert "RollboxSandboxStartFailures" in {f["name"] for f in admin.get("/v1/stats").json()["alerts"]}
        assert a.get("/v1/alerts").json()["firing"] == [] and a.get("/v1/stats").json()["alerts"] == []
        assert a.get("/v1/alerts").json()["rules"] == admin.get("/v1/alerts").json()["rules"]
        # In /metrics too: the alert series are an admin's; a tenant's key and a scrape without one see none.
        fired = 'rollbox_alerts_firing{alert="RollboxSandboxStartFailures"} 1.0'
        assert fired in admin.get("/metrics").text
        assert 'rollbox_alerts_total{alert="RollboxSandboxStartFailures"}' in admin.get("/metrics").text
        with client(server, None) as anonymous:
            for text in (a.get("/metrics").text, anonymous.get("/metrics").text):
                assert "rollbox_executions_total" in text and "rollbox_alerts" not in text


def test_metrics_show_a_tenants_series_to_an_operator_and_to_that_tenant_only(server: Running) -> None:
    def tenants(text: str) -> set[str]:
        return set(re.findall(r'tenant="([^"]*)"', text))

    code = {"code": "print(1)", "language": "python"}
    with client(server, KEYS["a"]) as a, client(server, KEYS["b"]) as b, client(server, KEYS["admin"]) as admin:
        assert a.post("/run_code", json=code).status_code == 200 and b.post("/run_code", json=code).status_code == 200
        everything, own = admin.get("/metrics"), a.get("/metrics")
    with client(server, None) as anonymous, client(server, "rbx_wrong") as wrong:
        totals = anonymous.get("/metrics")
        assert wrong.get("/metrics").status_code == 401
    assert {"team-a", "team-b"} <= tenants(everything.text)
    assert tenants(own.text) == {"", "team-a"}  # its own series, and the service's totals
    assert tenants(totals.text) == {""}  # no tenant's name, no tenant's figures
    ran = re.search(r'rollbox_executions_total\{status="ok",tenant=""\} (\S+)', totals.text)
    assert ran is not None and float(ran.group(1)) >= 2  # every tenant's executions, added up
    mine = re.search(r'rollbox_executions_total\{status="ok",tenant="team-a"\} (\S+)', own.text)
    assert mine is not None and 1 <= float(mine.group(1)) < float(ran.group(1))


def test_keys_and_settings_changed_while_the_service_runs_take_effect(
    server: Running, keys: tuple[Path, dict[str, str]]
) -> None:
    home = keys[0]
    env = {**os.environ, "ROLLBOX_HOME": str(home)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rollbox", "serve", *args], capture_output=True, text=True, env=env, check=True
        )

    def status(key: str) -> int:
        with client(server, key) as late:
            return late.get("/v1/sandboxes").status_code

    key = cli("--add-key", "team-late").stdout.strip()
    assert status(key) == 200  # at once: a key the service does not know makes it read the file again
    assert "takes it at once" in cli("--add-key", "team-later").stderr
    cli("--revoke", "team-late")
    assert within(5, lambda: status(key) == 401)  # revoked: refused within a tick
    tenants = home / "tenants.json"
    good = tenants.read_text()
    edited = json.loads(good)
    edited["tenants"]["team-a"]["max_running_jobs"] = 3
    tenants.write_text(json.dumps(edited))
    placement = server.service.jobs.scheduler.placement
    assert within(5, lambda: placement.quota("team-a") == 3)  # the scheduler's quotas follow the file
    tenants.write_text("{not json")
    time.sleep(2.5)  # a few ticks: the broken file is reported once, and the tenants read before stay in force
    assert status(KEYS["a"]) == 200 and placement.quota("team-a") == 3
    tenants.write_text(good)
    assert within(5, lambda: placement.quota("team-a") is None)


def test_rate_limit_and_backpressure_are_429_with_retry_after(server: Running) -> None:
    with client(server, KEYS["slow"]) as slow:
        statuses = [slow.get("/v1/sandboxes") for _ in range(4)]
        refused = [r for r in statuses if r.status_code == 429]
        assert refused and int(refused[0].headers["retry-after"]) >= 1 and "rate limit" in refused[0].json()["detail"]
    with client(server, KEYS["narrow"]) as narrow:
        sid = narrow.post("/v1/sandboxes", json={}).json()["id"]
        second = narrow.post("/v1/sandboxes", json={})
        assert second.status_code == 429 and "Retry-After" in second.headers
        assert "already has sandboxes open up to its limit (1, max_sandboxes)" in second.json()["detail"], second.text
        narrow.delete(f"/v1/sandboxes/{sid}")
        sleeper = {"code": "import time; time.sleep(2)", "language": "python"}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            first = pool.submit(narrow.post, "/run_code", json=sleeper)
            time.sleep(0.5)
            busy = narrow.post("/run_code", json=sleeper)
            assert first.result().status_code == 200
        assert busy.status_code == 429 and "in flight" in busy.json()["detail"]


def test_the_client_retries_a_429_after_retry_after(server: Running) -> None:
    with Client(server.url, api_key=KEYS["slow"], retries=3) as c:
        results = [c.run_code("print(7)")["run_result"]["stdout"] for _ in range(4)]  # beyond the burst of 2
    assert results == ["7\n"] * 4
    with Client(server.url, api_key="rbx_wrong") as bad, pytest.raises(ClientError) as refused:
        bad.stats()
    assert refused.value.status == 401


def test_auth_is_on_by_default_off_loopback(tmp_path: Path) -> None:
    assert ServerConfig(host="0.0.0.0").auth_required and not ServerConfig(host="127.0.0.1").auth_required
    assert ServerConfig(host="::1").auth_required is False and ServerConfig(host="10.1.2.3").auth_required
    env = {**os.environ, "ROLLBOX_HOME": str(tmp_path)}
    refused = subprocess.run(
        [sys.executable, "-m", "rollbox", "serve", "--host", "0.0.0.0", "--port", "1"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "--add-key" in refused.stderr
    made = subprocess.run(
        [sys.executable, "-m", "rollbox", "serve", "--add-key", "cli-team"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    key = made.stdout.strip()
    assert key.startswith("rbx_") and TenantStore(tmp_path / "tenants.json").authenticate(key) is not None


#: Settings a tenants file may not hold, each refused when the file is read with what the message names.
BAD_SETTINGS = [
    ({"rate_per_s": 0}, "rate_per_s must be a finite number of requests per second above 0"),
    ({"rate_per_s": -1.5}, "got -1.5"),
    ({"rate_per_s": float("nan")}, "got nan"),  # Python's JSON reads NaN and Infinity
    ({"rate_per_s": float("inf")}, "got inf"),
    ({"rate_per_s": 5e-324}, "got 5e-324"),  # a token would take forever to come back
    ({"rate_per_s": 10**400}, "rate_per_s must be"),  # beyond any float
    ({"rate_per_s": True}, "got True"),
    ({"rate_per_s": "50"}, "got '50'"),
    ({"burst": 0}, "burst must be a positive integer (as 1 or 100), got 0"),
    ({"burst": 2.5}, "got 2.5"),
    ({"burst": 4.0}, "got 4.0"),  # a count is an integer, as everywhere in rollbox's own shapes
    ({"burst": True}, "got True"),
    ({"burst": 2**53 + 1}, "burst must be at most 2**53"),
    ({"max_in_flight": 0}, "max_in_flight must be a positive integer (as 1 or 100), got 0"),
    ({"max_in_flight": None}, "got None"),
    ({"max_in_flight": False}, "got False"),
    ({"max_sandboxes": -1}, "max_sandboxes must be a positive integer (as 1 or 100), got -1"),
    ({"max_sandboxes": 1.5}, "got 1.5"),
    ({"max_running_jobs": 0}, "max_running_jobs must be a positive integer or null, got 0"),
]


@pytest.mark.parametrize(("setting", "message"), BAD_SETTINGS, ids=[repr(s)[:40] for s, _ in BAD_SETTINGS])
def test_a_tenants_file_with_a_setting_no_limit_can_use_is_refused_when_read(
    setting: dict[str, object], message: str, tmp_path: Path
) -> None:
    path = tmp_path / "tenants.json"
    path.write_text(json.dumps({"tenants": {"team-a": {"keys": [], **setting}}}))
    with pytest.raises(ValueError, match=r"is not a rollbox tenants file") as refused:
        TenantStore(path)
    assert message in str(refused.value) and "fix it or move it away" in str(refused.value)
    with pytest.raises(ValueError, match=re.escape(message)):  # nor made by a key's settings
        TenantStore(tmp_path / "other.json").add_key("team-b", **setting)


def test_the_smallest_and_largest_limits_are_kept_as_written(tmp_path: Path) -> None:
    path = tmp_path / "tenants.json"
    smallest = {"rate_per_s": 1, "burst": 1, "max_in_flight": 1, "max_sandboxes": 1, "max_running_jobs": 1}
    largest = {"rate_per_s": 1e300, "burst": 2**53, "max_in_flight": 10**30, "max_sandboxes": 10**30}
    path.write_text(json.dumps({"tenants": {"low": {"keys": [], **smallest}, "high": {"keys": [], **largest}}}))
    read = {t.name: t for t in TenantStore(path).tenants()}
    for name, written in (("low", smallest), ("high", largest)):
        for setting, value in written.items():
            assert getattr(read[name], setting) == value and type(getattr(read[name], setting)) is type(value)
    assert TenantStore(tmp_path / "made.json").add_key("team", rate_per_s=0.01, burst=4)  # as the tests' tenants


def test_serve_refuses_to_start_on_a_tenant_whose_rate_is_zero(tmp_path: Path) -> None:
    (tmp_path / "tenants.json").write_text(json.dumps({"tenants": {"team-a": {"rate_per_s": 0, "keys": []}}}))
    env = {**os.environ, "ROLLBOX_HOME": str(tmp_path)}
    refused = subprocess.run(
        [sys.executable, "-m", "rollbox", "serve", "--auth", "--port", "0"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-2000:]
    assert "tenants.json is not a rollbox tenants file" in lines[0] and "rate_per_s must be" in lines[0], lines[0]
