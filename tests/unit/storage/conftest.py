"""Fixtures of the storage tests (a test module's own fixture of the same name wins)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.storage.manager_helpers import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "d0", tmp_path / "d1"]
