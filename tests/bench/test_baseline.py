"""The stock baseline's request counter (worker.baseline)."""

from __future__ import annotations

from ckptbench.worker import baseline


def test_baseline_counter_separates_metadata_bytes():
    baseline.take_request_counts()
    counter = baseline._COUNTER
    counter.add("http://h/download/storage/v1/b/b/o/p%2Fckpt%2F.metadata?alt=media", b"x" * 7)
    counter.add("http://h/download/storage/v1/b/b/o/p%2Fckpt%2F__0_0.distcp?alt=media", b"y" * 5)
    counts = baseline.take_request_counts()
    assert (counts.requests, counts.metadata_bytes, counts.data_bytes) == (2, 7, 5)
    assert baseline.take_request_counts().requests == 0
