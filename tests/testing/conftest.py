"""Shared fixtures: one LocalGCS per test module (each start costs well under a second)."""

import pytest

from gcsckpt.testing import LocalGCS


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        yield endpoint
