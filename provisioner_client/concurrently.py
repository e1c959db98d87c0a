"""Several awaits at once, failing as the first of them failed: a `ConvergeError` or `BusError`
reaches the CLI as itself (its exit code), never wrapped in an exception group."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio


async def all_of(*calls: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Runs `calls` at once and returns when all have; the first failure cancels the rest and is raised."""
    try:
        async with anyio.create_task_group() as tasks:
            for call in calls:
                tasks.start_soon(call)
    except BaseExceptionGroup as group:
        raise _first(group) from None


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first failure in `group` that is not the cancellation of a sibling."""
    for err in group.exceptions:
        if isinstance(err, BaseExceptionGroup):
            return _first(err)
        if not isinstance(err, anyio.get_cancelled_exc_class()):
            return err
    return group
