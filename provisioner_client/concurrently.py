"""Several awaits at once, failing as the first of them failed: a `ConvergeError` or `BusError`
reaches the CLI as itself (its exit code), never wrapped in an exception group."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from registry.errors import sole_exception


async def all_of(*calls: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Runs `calls` at once and returns when all have; the first failure cancels the rest and is raised."""
    try:
        async with anyio.create_task_group() as tasks:
            for call in calls:
                tasks.start_soon(call)
    except BaseExceptionGroup as group:
        raise sole_exception(group) from None
