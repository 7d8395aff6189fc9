"""A real registry on 127.0.0.1 for the pull tests: Debian's ``docker-registry`` (the reference implementation),
with a configuration of its own in a temporary directory, either open to anyone or behind token auth served by a
small token service here (RS256 tokens signed with a key and certificate made by the test, trusted by the
registry through ``rootcertbundle``). Images are pushed into it with ``skopeo copy`` from layouts the tests write.
Nothing here talks to anything but the loopback."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import re
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

USER, PASSWORD = "trainer", "s3cret"
_SERVICE, _ISSUER = "rollbox-test-registry", "rollbox-test-token-service"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Registry:
    """A running registry: ``host`` is ``127.0.0.1:PORT``; ``storage`` its blobs on disk."""

    host: str
    storage: Path
    log: Path
    auth: bool

    def push(self, layout: Path, name: str, *, all_platforms: bool = False) -> None:
        """Copy the image in the OCI layout ``layout`` to ``HOST/name`` (the whole index with ``all_platforms``)."""
        cmd = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false"]
        if self.auth:
            cmd += ["--dest-creds", f"{USER}:{PASSWORD}"]
        if all_platforms:
            cmd += ["--all"]
        subprocess.run([*cmd, f"oci:{layout}", f"docker://{self.host}/{name}"], check=True, timeout=120)

    def layers(self, name: str, tag: str) -> list[str]:
        """The digests of the layers of ``name:tag`` as the registry holds it (skopeo may have compressed them)."""
        accept = {
            "Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
        }
        auth = None
        response = httpx.get(f"http://{self.host}/v2/{name}/manifests/{tag}", headers=accept, timeout=10)
        if response.status_code == 401:
            challenge = dict(re.findall(r'(\w+)="([^"]*)"', response.headers["WWW-Authenticate"]))
            token = httpx.get(
                challenge["realm"],
                params={"service": challenge["service"], "scope": f"repository:{name}:pull"},
                auth=(USER, PASSWORD),
                timeout=10,
            ).json()["token"]
            auth = {"Authorization": f"Bearer {token}"}
            response = httpx.get(f"http://{self.host}/v2/{name}/manifests/{tag}", headers=accept | auth, timeout=10)
        response.raise_for_status()
        return [layer["digest"] for layer in response.json()["layers"]]

    def blob_data(self, digest: str) -> Path:
        """Where the registry keeps blob ``digest`` (its filesystem driver's layout)."""
        hexd = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _TokenService:
    """Issues pull/push tokens for any repository to ``USER``:``PASSWORD``; 401 to anyone else."""

    def __init__(self, directory: Path) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _ISSUER)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.bundle = directory / "token-cert.pem"
        self.bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.requests: list[dict[str, list[str]]] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlparse(self.path).query)
                service.requests.append(query)
                expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"token": service.token(query.get("scope", []))}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, scopes: list[str]) -> str:
        access = []
        for scope in scopes:
            for one in scope.split(" "):
                kind, name, actions = one.split(":")[0], ":".join(one.split(":")[1:-1]), one.split(":")[-1]
                access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        der = self.cert.public_bytes(serialization.Encoding.DER)
        header = {"alg": "RS256", "typ": "JWT", "x5c": [base64.b64encode(der).decode()]}
        claims = {
            "iss": _ISSUER,
            "sub": USER,
            "aud": _SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64(signature)}"


@contextmanager
def registry(directory: Path, *, auth: bool = False) -> Iterator[Registry]:
    """A registry on 127.0.0.1 serving from ``directory``, behind token auth when ``auth``; stopped at exit."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    storage = directory / "storage"
    lines = [
        "version: 0.1",
        "log: {level: info}",
        f"storage: {{filesystem: {{rootdirectory: {storage}}}, delete: {{enabled: true}}}}",
        f"http: {{addr: 127.0.0.1:{port}, secret: rollbox-test}}",
    ]
    tokens = _TokenService(directory) if auth else None
    if tokens is not None:
        lines.append(
            f"auth: {{token: {{realm: {tokens.realm}, service: {_SERVICE}, issuer: {_ISSUER}, "
            f"rootcertbundle: {tokens.bundle}}}}}"
        )
    config = directory / "config.yml"
    config.write_text("\n".join(lines) + "\n")
    log = directory / "registry.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=2).status_code in (200, 401):
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"docker-registry did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield Registry(host=f"127.0.0.1:{port}", storage=storage, log=log, auth=auth)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if tokens is not None:
            tokens.server.shutdown()
            tokens.server.server_close()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
