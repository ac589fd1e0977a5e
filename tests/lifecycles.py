"""The test toolsets' lifecycle log, and polling until a lifecycle step has happened."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from tests.testapp.assistant_tools import LIFECYCLE_LOG


async def eventually(condition: Callable[[], bool], within: float) -> bool:
    """Poll ``condition`` until it holds or ``within`` seconds pass."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


@pytest.fixture
def log() -> Iterator[list[str]]:
    """The test toolsets' shared lifecycle log, emptied for this test."""
    LIFECYCLE_LOG.clear()
    yield LIFECYCLE_LOG
    LIFECYCLE_LOG.clear()
