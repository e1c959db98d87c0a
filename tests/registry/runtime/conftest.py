"""The root logger as each test found it: the tests here configure logging as a program does."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    handlers, level = logging.getLogger().handlers[:], logging.getLogger().level
    yield
    logging.getLogger().handlers[:] = handlers
    logging.getLogger().setLevel(level)
