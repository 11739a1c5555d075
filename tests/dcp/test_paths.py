"""gcsckpt.dcp.paths: gs:// checkpoint ids and the relative paths a checkpoint may name."""

from __future__ import annotations

import pytest

from gcsckpt.dcp.paths import check_relative_path, is_gcs_checkpoint_id, parse_checkpoint_id
from gcsckpt.io.names import check_bucket_name


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


# GCS's bucket naming rules, one case per rule (gcsckpt.io.names, which LocalGCS applies too).
GOOD_BUCKETS = ["abc", "my-bucket_1", "a" * 63, "a.b.c", ".".join(["a" * 63] * 3) + ".abc"]
BAD_BUCKETS = {
    "b": "3-63",
    "ab": "3-63",
    "a" * 64: "3-63",
    ".".join(["a" * 63] * 4): "3-222",
    "My-Bucket": "lowercase",
    "bad bucket": "lowercase",
    "-abc": "start and end",
    "abc_": "start and end",
    "a..b": "dot-separated part",
    "a" * 64 + ".b": "dot-separated part",
    "192.168.5.4": "IP address",
    "goog-data": "goog",
    "my-google-bucket": "google",
}


@pytest.mark.parametrize("name", GOOD_BUCKETS)
def test_valid_bucket_names_parse(name):
    assert check_bucket_name(name) == name
    assert parse_checkpoint_id(f"gs://{name}/p").bucket == name


@pytest.mark.parametrize("name, rule", BAD_BUCKETS.items())
def test_invalid_bucket_names_are_refused_alike(name, rule):
    with pytest.raises(ValueError, match=f"is not a valid GCS bucket name: .*{rule}"):
        check_bucket_name(name)
    with pytest.raises(ValueError, match=f"is not a valid bucket name \\(.*{rule}"):
        parse_checkpoint_id(f"gs://{name}/p")
