"""Fixtures for the range reader tests: one LocalGCS (emulator + nginx) per test module."""

from __future__ import annotations

import pytest
from io_fixtures import BUCKET

from gcsckpt.testing import LocalGCS


@pytest.fixture(scope="module")
def gcs():
    """A LocalGCS with bucket BUCKET, stopped after the module."""
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint
