"""gcsckpt.dcp.paths: gs:// checkpoint ids and the relative paths a checkpoint may name."""

from __future__ import annotations

import pytest

from gcsckpt.dcp.paths import check_relative_path, is_gcs_checkpoint_id, parse_checkpoint_id


def test_parse_checkpoint_id():
    loc = parse_checkpoint_id("gs://my-bucket/a/b/step_10/")
    assert (loc.bucket, loc.prefix) == ("my-bucket", "a/b/step_10")
    assert loc.object_name(".metadata") == "a/b/step_10/.metadata"
    assert loc.url() == "gs://my-bucket/a/b/step_10"
    root = parse_checkpoint_id("gs://bkt")
    assert root.prefix == "" and root.object_name("__0_0.distcp") == "__0_0.distcp"


@pytest.mark.parametrize(
    "bad",
    ["/local/path", "s3://b/p", "gs://", "gs://UPPER/x", "gs://b/../x", "gs://bk/a//b", "gs://ab"],
)
def test_bad_checkpoint_ids(bad):
    with pytest.raises(ValueError, match="checkpoint_id"):
        parse_checkpoint_id(bad)
    assert not is_gcs_checkpoint_id(bad)


def test_non_string_checkpoint_id():
    with pytest.raises(ValueError, match="PosixPath"):
        parse_checkpoint_id(__import__("pathlib").Path("/tmp/x"))


@pytest.mark.parametrize(
    "path",
    [
        "../x",
        "a/../b",
        "/etc/passwd",
        "gs://other/x",
        "http://h/x",
        "C:x",
        "a\\b",
        "a//b",
        "",
        "./a",
    ],
)
def test_unsafe_relative_paths(path):
    with pytest.raises(ValueError, match="relative path|segment"):
        check_relative_path(path, where="test")


def test_safe_relative_paths():
    for path in ("__0_0.distcp", "sub/__1_3.distcp", "a.b-c_d"):
        assert check_relative_path(path, where="test") == path
