"""A sandbox on an image's root, for real: the host's files are out of sight, the root is read-only and carries no
privilege (set-ID bits, devices, links leading out), the image's configuration applies where it weakens nothing,
warm pools keep the image across resets, and a runtime layer mounts over it. The whole attack suite runs on an
image's root too (``tests/test_attacks.py``, the ``image`` path)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from oci_images import HOST_IMAGE_CONFIG, Entry, host_files_layer, host_image, tar_layer, write_layout
from rollbox import Limits, Sandbox, SandboxError, SandboxPool, Status
from rollbox.sandbox import SandboxConfig, WarmSandboxes
from rollbox.sandbox.images import Image, ImageStore
from rollbox.sandbox.runtime import LayerStore, RuntimeSpec
from test_layers import wheels  # noqa: F401  (the fixture)

if os.geteuid() != 0:
    pytest.skip("images run in the namespaces backend, which needs root", allow_module_level=True)

LIMITS = Limits(timeout_s=20, cpu_time_s=10, memory_bytes=256 * 2**20, disk_bytes=16 * 2**20)


def run(config: SandboxConfig, *commands: list[str]) -> list[tuple[Status, str, str]]:
    async def main() -> list[tuple[Status, str, str]]:
        async with Sandbox(config) as sb:
            return [(r.status, r.stdout_text, r.stderr_text) for r in [await sb.exec(c) for c in commands]]

    return asyncio.run(main())


def hostile_image() -> Image:
    """The host image, with a set-user-ID copy of ``id``, an absolute link to /etc/passwd (the image's, inside)
    and a relative one climbing far above the root."""
    suid_id = Path("/usr/bin/id").read_bytes()
    layout = Path(tempfile.mkdtemp(prefix="rollbox-hostile-image-")) / "layout"
    top = tar_layer(
        [
            Entry("usr", "dir", mode=0o755),
            Entry("usr/local", "dir", mode=0o755),
            Entry("usr/local/bin", "dir", mode=0o755),
            Entry("usr/local/bin/suid-id", data=suid_id, mode=0o4755),
            Entry("usr/local/bin/sgid-id", data=suid_id, mode=0o2755),
            Entry("escape-abs", "symlink", target="/etc/passwd"),
            Entry("escape-rel", "symlink", target="../../../../../../etc/passwd"),
            Entry("etc", "dir", mode=0o755),
            Entry("etc/secret-of-the-image", data=b"image secret\n", mode=0o600),
        ]
    )
    try:
        write_layout(layout, [host_files_layer(), top], config=HOST_IMAGE_CONFIG, compress=False)
        return ImageStore().import_layout(layout, ref="rollbox-test/hostile:1")
    finally:
        shutil.rmtree(layout.parent)


def test_the_hosts_files_are_invisible_on_an_image_root(tmp_path: Path) -> None:
    secret = Path(tempfile.mkdtemp(prefix="rollbox-host-secret-", dir="/root")) / "secret"
    secret.write_text("host secret\n")
    try:
        listing, found, usr, etc = run(
            SandboxConfig(limits=LIMITS, image=host_image()),
            ["ls", "/"],
            ["sh", "-c", f"cat {secret} /work/main/README.md /etc/shadow /etc/hostname 2>&1; ls /root /home 2>&1"],
            # The host's own /usr is not there either: only what the image holds.
            ["sh", "-c", "ls /usr/share/doc /usr/lib/gcc /usr/bin/gcc 2>&1; echo rc=$?"],
            ["cat", "/etc/passwd"],
        )
    finally:
        secret.unlink()
        secret.parent.rmdir()
    assert listing[0] is Status.OK
    image_top = {e.name for e in os.scandir(host_image().root)}
    assert set(listing[1].split()) <= image_top | {"proc", "dev", "tmp", "workspace"}
    assert "host secret" not in found[1] and "No such file" in found[1]
    assert Path("/usr/share/doc").is_dir() and usr[1].count("No such file") == 3 and "rc=2" in usr[1]
    assert Path("/etc/passwd").read_text() != etc[1] and "sandbox:x:1000:1000" in etc[1]


def test_an_image_root_is_read_only_and_its_set_id_bits_and_links_carry_nothing() -> None:
    image = hostile_image()
    results = run(
        SandboxConfig(limits=LIMITS, image=image),
        ["sh", "-c", "touch /usr/bin/x /etc/x /x 2>&1; echo rc=$?"],
        ["suid-id", "-u"],
        ["sgid-id", "-g"],
        ["stat", "-c", "%a", "/usr/local/bin/suid-id", "/usr/local/bin/sgid-id"],
        ["sh", "-c", "cat /escape-abs /escape-rel"],
        ["cat", "/etc/secret-of-the-image"],
        ["cat", "/proc/self/mountinfo"],
    )
    touched, uid, gid, modes, links, readable, mounts = results
    assert "Read-only file system" in touched[1] and "rc=1" in touched[1]
    assert uid[1].strip() == "1000" and gid[1].strip() == "1000"  # no privilege from the bits (dropped)
    assert modes[1].split() == ["755", "755"]
    image_passwd = (image.root / "etc" / "passwd").read_text()
    assert links[0] is Status.OK and links[1] == image_passwd * 2  # both resolve inside the image
    assert readable[1] == "image secret\n"  # readable by the sandbox's uid as by its owner (no secret of the host)
    options = {line.split()[4]: line.split()[5].split(",") for line in mounts[1].splitlines()}
    for point in ("/usr", "/etc", "/opt"):  # the image's directories: read-only, and set-ID bits ignored besides
        assert "ro" in options[point] and "nosuid" in options[point] and "nodev" in options[point], options


def test_the_images_configuration_applies_where_it_weakens_nothing() -> None:
    (env,) = run(SandboxConfig(limits=LIMITS, image=host_image(), env={"TASK": "mine"}), ["sh", "-c", "env; id; pwd"])
    lines = set(env[1].splitlines())
    assert {"IMAGE_VARIABLE=from-the-image", "TASK=mine", "HOME=/workspace", "USER=sandbox"} <= lines
    assert "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" in lines  # the image's PATH
    assert any(line.startswith("uid=1000(sandbox)") for line in lines)  # User "root" is the sandbox's uid
    assert "/workspace" in lines  # commands start in /workspace, not the image's WorkingDir


def test_warm_pools_keep_the_image_and_are_kept_per_configuration() -> None:
    image = host_image()

    async def main() -> tuple[list[str], int]:
        roots = []
        async with SandboxPool(SandboxConfig(limits=LIMITS, image=image), size=1) as pool:
            for _ in range(3):
                async with pool.sandbox() as sb:
                    result = await sb.exec(["sh", "-c", "echo $IMAGE_VARIABLE; touch /workspace/dirty"])
                    roots.append(result.stdout_text)
        async with WarmSandboxes(size=1) as warm:
            for config in (SandboxConfig(limits=LIMITS, image=image), SandboxConfig(limits=LIMITS)) * 2:
                async with warm.sandbox(config) as sb:
                    seen = await sb.exec(["sh", "-c", "echo ${IMAGE_VARIABLE:-host}"])
                    roots.append(seen.stdout_text)
            pools = len(warm._pools)
        return roots, pools

    roots, pools = asyncio.run(main())
    assert roots == ["from-the-image\n"] * 3 + ["from-the-image\n", "host\n"] * 2
    assert pools == 2


def test_a_runtime_layer_mounts_over_an_image(wheels: Path) -> None:  # noqa: F811
    layer = asyncio.run(LayerStore().ensure(RuntimeSpec(requirements=("rbx-greet==1.0",))))
    (greet, which) = run(
        SandboxConfig(limits=LIMITS, image=host_image(), runtime=layer),
        ["python3", "-c", "import rbx_greet, sys; print(rbx_greet.WORD, sys.prefix)"],
        ["sh", "-c", "command -v python3; echo $PATH"],
    )
    assert greet[0] is Status.OK, greet
    assert greet[1].split() == ["hello", "one", "/opt/rollbox/env"]
    assert which[1].splitlines() == ["/opt/rollbox/env/bin/python3", "/opt/rollbox/env/bin:" + HOST_PATH]


HOST_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


def test_a_sandbox_on_an_image_whose_root_was_collected_fails_saying_what_to_do(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    layout = write_layout(tmp_path / "layout", [tar_layer([Entry("bin", "dir", mode=0o755)])])
    image = store.import_layout(layout, ref="gone:1")
    store.remove("gone:1")
    assert store.gc() > 0

    async def main() -> None:
        async with Sandbox(SandboxConfig(limits=LIMITS, image=image)):
            pass

    with pytest.raises(SandboxError, match="gone or being removed; import the image again"):
        asyncio.run(main())
