"""The service's JSON answers: any text writable, errors as ``{"detail": "..."}``."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi.responses import JSONResponse

__all__ = ["SafeJSONResponse", "error"]


class SafeJSONResponse(JSONResponse):
    """JSON that any string can be written as: text with lone surrogates (which a request may carry, and an error
    message may echo) is escaped instead of failing to encode."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def error(status: int, message: str, retry_after_s: float | None = None) -> SafeJSONResponse:
    """An error answer: ``status``, ``{"detail": message}``, and ``Retry-After`` when a retry may succeed."""
    headers = {"Retry-After": str(max(1, math.ceil(retry_after_s)))} if retry_after_s is not None else None
    return SafeJSONResponse({"detail": message}, status_code=status, headers=headers)
