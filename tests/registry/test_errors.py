"""`registry.errors.sole_exception`: the failure a task group's exception group stands for, the one
rule for the signal handler, the seat's CLI and listing, and the node client's concurrent awaits."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from registry.errors import BusError, NotFound, sole_exception


def test_the_one_failure_inside_nested_groups_of_one_is_itself() -> None:
    failure = NotFound("read b", "no such bucket")
    assert sole_exception(BaseExceptionGroup("outer", [ExceptionGroup("inner", [failure])])) is failure


def test_the_cancellations_of_siblings_are_passed_over() -> None:
    failure = BusError("write b", "closed")
    group = BaseExceptionGroup("tasks", [asyncio.CancelledError(), BaseExceptionGroup("inner", [failure])])
    assert sole_exception(group) is failure


def test_of_several_failures_the_first_depth_first_is_the_one() -> None:
    first, second, third = BusError("write a", "closed"), BusError("write b", "closed"), LookupError("c")
    group = ExceptionGroup("tasks", [ExceptionGroup("inner", [first, second]), third])
    assert sole_exception(group) is first


def test_a_group_of_nothing_but_cancellations_is_itself() -> None:
    group = BaseExceptionGroup("tasks", [asyncio.CancelledError(), asyncio.CancelledError()])
    assert sole_exception(group) is group


async def _one_fails_one_waits() -> None:
    async def fails() -> None:
        raise NotFound("read b", "no such bucket")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(fails)
        tasks.start_soon(anyio.sleep_forever)


async def test_a_task_group_s_failure_is_found_as_raised() -> None:
    with pytest.raises(BaseExceptionGroup) as raised:
        await _one_fails_one_waits()
    found = sole_exception(raised.value)
    assert isinstance(found, NotFound)
    assert found.reason == "no such bucket"
