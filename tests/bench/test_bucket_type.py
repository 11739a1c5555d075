"""The bucket type in case names, from a bucket's metadata (runner.bucket_type)."""

from __future__ import annotations

from types import SimpleNamespace

from ckptbench.runner.bucket_type import classify_bucket, run_bucket_type


def test_bucket_type_comes_from_the_bucket_metadata():
    def bucket(hns=None, location_type="region", storage_class="STANDARD"):
        return SimpleNamespace(
            hierarchical_namespace_enabled=hns,
            location_type=location_type,
            storage_class=storage_class,
        )

    assert classify_bucket(bucket()) == "reg"
    assert classify_bucket(bucket(location_type="multi-region")) == "reg"
    assert classify_bucket(bucket(hns=True)) == "hns"
    assert classify_bucket(bucket(location_type="zone")) == "zon"
    assert classify_bucket(bucket(location_type=None, storage_class="RAPID")) == "zon"
    assert run_bucket_type(None, None) == "local"  # the embedded endpoint: nothing to ask
