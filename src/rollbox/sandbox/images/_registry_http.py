"""Speaking to one registry: HTTP with its authentication, and where credentials for it come from.

A registry answers 401 with a challenge: ``Bearer realm=...,service=...,scope=...`` sends the client to its token
service (with basic credentials when there are some) for a token it then presents; ``Basic`` takes the
credentials themselves. Credentials are the ones given, else ``ROLLBOX_REGISTRY_USER`` and
``ROLLBOX_REGISTRY_PASSWORD``, else the ``auth`` Docker's ``docker login`` left in ``~/.docker/config.json``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from ._errors import ImageError
from ._reference import Reference

__all__ = ["Credentials", "Session", "credentials_for"]


@functools.cache
def _tls() -> ssl.SSLContext:
    """httpx's TLS context (certifi's authorities), made once: loading them costs more than a small pull."""
    return httpx.create_ssl_context()


_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Credentials:
    """A user name and password (or token) for a registry's basic auth or its token service."""

    username: str
    password: str


def credentials_for(registry: str, docker_config: Path | None = None) -> Credentials | None:
    """The credentials for ``registry``: ``ROLLBOX_REGISTRY_USER`` and ``ROLLBOX_REGISTRY_PASSWORD`` when both are
    set, else the ``auth`` of ``~/.docker/config.json`` (or ``docker_config``) for that host, else None."""
    user, password = os.environ.get("ROLLBOX_REGISTRY_USER"), os.environ.get("ROLLBOX_REGISTRY_PASSWORD")
    if user and password is not None:
        return Credentials(user, password)
    path = docker_config or Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        auths = json.loads(path.read_text()).get("auths", {})
    except (OSError, ValueError, AttributeError):
        return None
    keys = {registry, f"https://{registry}", f"http://{registry}"}
    if registry == "docker.io":
        keys |= {"https://index.docker.io/v1/", "index.docker.io"}
    for key, entry in auths.items() if isinstance(auths, dict) else ():
        if key.rstrip("/") in keys or key in keys:
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                name, _, secret = base64.b64decode(entry["auth"]).decode().partition(":")
                return Credentials(name, secret)
    return None


class BrokenTransfer(ImageError):
    """A blob's transfer that stopped partway (the connection broke, the registry ended early): what came is kept
    for the next pull to resume from."""


class Session:
    """HTTP to one registry's repository, with its authentication: a bearer token fetched when challenged for one
    (and again when it expires), or basic credentials when the registry asks for those."""

    def __init__(self, ref: Reference, credentials: Credentials | None, plain_http: bool, timeout_s: float) -> None:
        self.ref = ref
        self.credentials = credentials
        self.base = f"{'http' if plain_http else 'https'}://{ref.api_host}/v2/{ref.repository}"
        self.client = httpx.Client(timeout=timeout_s, follow_redirects=True, verify=_tls())
        self.authorization: str | None = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    @contextlib.contextmanager
    def get(self, path: str, headers: dict[str, str], what: str) -> Iterator[httpx.Response]:
        """A streamed GET of ``base/path``, authenticated; its status is checked by the caller (but 401/403)."""
        answered = False
        for attempt in range(2):
            sent = {**headers, **({"Authorization": self.authorization} if self.authorization else {})}
            try:
                with self.client.stream("GET", f"{self.base}/{path}", headers=sent) as response:
                    if response.status_code == 401 and attempt == 0 and self._answer(response):
                        continue
                    if response.status_code in (401, 403):
                        raise ImageError(self._refused(response.status_code, what))
                    answered = True
                    yield response
                    return
            except httpx.TransportError as exc:
                if answered:  # the body was coming: what came of it is kept
                    raise BrokenTransfer(
                        f"the connection to registry {self.ref.registry} broke during {what} "
                        f"({type(exc).__name__}: {exc}): pull again to resume"
                    ) from exc
                raise ImageError(
                    f"registry {self.ref.registry} cannot be reached for {what} ({type(exc).__name__}: {exc}): "
                    "check the address, that it is up, and --plain-http for one served without TLS"
                ) from exc

    def _answer(self, response: httpx.Response) -> bool:
        """Take up the challenge of a 401: whether there is something new to try."""
        challenge = response.headers.get("WWW-Authenticate", "")
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if self.credentials is None or self.authorization is not None:
                return False
            token = base64.b64encode(f"{self.credentials.username}:{self.credentials.password}".encode()).decode()
            self.authorization = f"Basic {token}"
            return True
        if scheme.lower() != "bearer":
            return False
        fields = dict(_CHALLENGE.findall(params))
        if "realm" not in fields:
            return False
        query = {"service": fields.get("service", ""), "scope": fields.get("scope") or self.scope}
        auth = (self.credentials.username, self.credentials.password) if self.credentials else None
        try:
            answer = self.client.get(fields["realm"], params={k: v for k, v in query.items() if v}, auth=auth)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # the realm is the registry's word
            raise ImageError(
                f"the token service of {self.ref.registry} ({fields['realm']}) cannot be reached ({exc}): "
                "check that it is up"
            ) from exc
        if answer.status_code in (401, 403):
            raise ImageError(self._refused(answer.status_code, "a token"))
        try:
            body = answer.json()
            token = body.get("token") or body["access_token"]
            if not isinstance(token, str) or not token.isprintable():
                raise ValueError("not a token")
        except (ValueError, KeyError, AttributeError) as exc:
            raise ImageError(
                f"the token service of {self.ref.registry} answered {answer.status_code} without a token: "
                "check the registry's auth configuration"
            ) from exc
        self.authorization = f"Bearer {token}"
        return True

    @property
    def scope(self) -> str:
        return f"repository:{self.ref.repository}:pull"

    def _refused(self, status: int, what: str) -> str:
        if self.credentials is None:
            todo = (
                "give credentials (--username/--password-stdin, ROLLBOX_REGISTRY_USER and ROLLBOX_REGISTRY_PASSWORD, "
                "or docker login's ~/.docker/config.json)"
            )
        else:
            todo = f"check that user {self.credentials.username!r} and its password are right and may pull it"
        return f"registry {self.ref.registry} refused {what} of {self.ref.repository} ({status}): {todo}"
