"""The running server as a whole: what its start leaves behind."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from mesh_dev.local_nats import LocalNats
from tests.helpers import serving


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """No object frozen before the test, and none left frozen after it."""
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
async def test_the_start_up_heap_is_frozen_once_the_seat_serves(nats_server: LocalNats) -> None:
    assert gc.get_freeze_count() == 0
    async with serving(nats_server.url):
        frozen = gc.get_freeze_count()
        assert frozen > 10_000, frozen  # the modules and objects of the start, out of every full collection
