"""The check's modules are imported ahead, once per process, in the background."""

from __future__ import annotations

import sys

import pytest

from app.quality import preload

pytestmark = pytest.mark.unit


def test_the_check_modules_are_imported_once_in_the_background() -> None:
    first = preload.start()
    second = preload.start()
    first.join(timeout=600)

    assert second is first
    assert first.daemon
    assert not first.is_alive()
    assert preload.MODULE in sys.modules
