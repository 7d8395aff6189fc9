"""rollbox.server: rollbox over HTTP (``rollbox serve``).

Sandboxes, grading, tasks and the live figures under ``/v1``; SandboxFusion's ``/run_code`` and ``/submit`` for
trainers wired to it; Prometheus metrics at ``/metrics``; the dashboard at ``/dashboard``; the OpenAPI spec at
``/openapi.json``. Needs the ``server`` extra (FastAPI, uvicorn, prometheus-client).
"""

from ._app import create_app
from ._config import ServerConfig
from ._serve import serve
from ._tenants import Tenant, TenantStore

__all__ = ["ServerConfig", "Tenant", "TenantStore", "create_app", "serve"]
