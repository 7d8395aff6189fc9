"""``/run_code`` on an image serves from a warm pool of its configuration (limits and image), as on the host: the
sandboxes are made once, and each request still gets a sandbox as fresh as a new one (nothing a program left in
/workspace, /tmp or its processes is seen by the next)."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from oci_images import host_image
from rollbox.server import ServerConfig
from serving import running

if os.geteuid() != 0:
    pytest.skip("images run in the namespaces backend, which needs root", allow_module_level=True)

#: Leaves files and a process behind, and reports what an earlier request left.
PROGRAM = """
import os, subprocess
left = [p for p in ("/workspace/left", "/tmp/left") if os.path.exists(p)]
sleepers = subprocess.run(["sh", "-c", "ls /proc | grep -c '^[0-9]'"], capture_output=True, text=True).stdout.strip()
print(",".join(left) or "clean", os.environ.get("IMAGE_VARIABLE"))
for p in ("/workspace/left", "/tmp/left"):
    open(p, "w").write("x")
subprocess.Popen(["sleep", "1000"], start_new_session=True)
"""


def test_an_image_language_is_served_from_a_warm_pool_fresh_for_each_request() -> None:
    image = host_image()  # python3 and a shell; its Env names IMAGE_VARIABLE
    config = ServerConfig(language_images=image.refs[0], pool_size=1, warm_configs=2)  # the session's store
    with running(config) as r, httpx.Client(base_url=r.url, timeout=120) as http:
        executor = r.service.executor
        outputs = []
        for _ in range(3):
            body = http.post("/run_code", json={"code": PROGRAM, "language": "python"}).json()
            assert body["status"] == "Success", body
            outputs.append(body["run_result"]["stdout"])
            # One pool of one sandbox, made by the first request and kept (back once its reset, in the background,
            # is done): no sandbox is made per request.
            deadline = time.monotonic() + 30
            while executor.pool_sizes() != (1, 0) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert executor.pool_sizes() == (1, 0)
        pools = list(executor._pools)
        assert len(pools) == 1 and pools[0].image == image
    assert outputs == ["clean from-the-image\n"] * 3, outputs
