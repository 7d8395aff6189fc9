"""rollbox.client: a rollbox service over HTTP, from Python (sync and async, on httpx; the ``client`` extra).

Imports rollbox's data types (``ExecResult``, ``Limits``, ``Verdict``), never the server.
"""

from ._calls import ClientError
from ._client import AsyncClient, AsyncRemoteSandbox, Client, RemoteSandbox

__all__ = ["AsyncClient", "AsyncRemoteSandbox", "Client", "ClientError", "RemoteSandbox"]
