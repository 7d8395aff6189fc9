"""Waiting for work that must not be abandoned half done, whatever cancels the waiter."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["settled"]


async def settled(*futures: asyncio.Future[Any]) -> bool:
    """Wait until every one of ``futures`` has ended, through any number of cancellations of the caller (the
    futures themselves are never cancelled by it); whether the caller was cancelled meanwhile, in which case it
    should raise ``CancelledError`` once it has dealt with what they left."""
    cancelled = False
    while not all(future.done() for future in futures):
        try:
            await asyncio.wait(futures)
        except asyncio.CancelledError:
            cancelled = True
    return cancelled
