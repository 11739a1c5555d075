"""RangeReader: many ranged GETs in flight, bytes written straight into caller buffers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gcsckpt.io import defaults
from gcsckpt.io.buffers import as_writable_buffer
from gcsckpt.io.endpoint import resolve_endpoint
from gcsckpt.io.errors import RangeReadError, make_error
from gcsckpt.io.extension import _gcsio
from gcsckpt.io.native_client import NativeClientFront, check_client_options, start_native_client
from gcsckpt.io.records import RangeRequest
from gcsckpt.io.retry import RetryPolicy

# The block checksums of one object: BlockSums(size, starts, crcs) with `size` in bytes, `starts`
# the blocks' first bytes (little-endian uint64s from 0, ascending) and `crcs` their CRC-32Cs
# (little-endian uint32s). Built once per object and passed as RangeRequest.checksums; raises
# ValueError naming what is malformed. Made in C++ so a submit passes it by reference.
BlockSums = _gcsio.BlockSums


class ReadHandle:
    """Progress of one ``RangeReader.submit`` call.

    Destinations must not be read (or freed) until their index was returned by
    ``next_completed`` or ``wait`` returned; they are never written after ``cancel`` returns.
    """

    def __init__(self, batch, requests: Sequence[RangeRequest]):
        self._batch = batch
        self._requests = requests

    def next_completed(self, timeout_s: float | None = None) -> list[int]:
        """Indices (into the submitted requests) whose bytes are now complete.

        Blocks (GIL released) until at least one request completes that was not reported
        before; returns ``[]`` once every request has been reported.

        Raises:
            RangeReadError: a request failed for good (after retries); the remaining work is
                cancelled. ``ObjectChangedError`` when an object was replaced during the
                read; ``ObjectNotFoundError`` when all failures are HTTP 404.
            TimeoutError: nothing completed within ``timeout_s`` seconds.
        """
        indices, failed = self._batch.next_completed(timeout_s)
        if failed:
            self._batch.cancel()
            raise self._error()
        return indices

    def wait(self) -> None:
        """Blocks (GIL released) until every request has finished.

        Raises:
            RangeReadError: listing every request that failed for good.
        """
        if self._batch.wait():
            raise self._error()

    def done(self) -> bool:
        """True once no request is outstanding (finished, failed or cancelled)."""
        return self._batch.done()

    def cancel(self) -> None:
        """Stops outstanding transfers; no destination is written after this returns."""
        self._batch.cancel()

    def generations(self) -> dict[tuple[str, str], int]:
        """{(bucket, object): generation} this submit read (0: the endpoint named none).

        Pass them as ``RangeRequest.generation`` to later submits to keep reading the same
        version of each object.
        """
        return {(b, o): g for b, o, g in self._batch.generations()}

    @property
    def num_fetches(self) -> int:
        """HTTP range fetches planned (after coalescing and splitting), before retries."""
        return self._batch.num_fetches()

    def __len__(self) -> int:
        return len(self._batch)

    def _error(self) -> RangeReadError:
        failures = []
        for f in self._batch.failures():
            r = self._requests[f["index"]]
            failures.append(
                {
                    "bucket": r[0],
                    "object": r[1],
                    "offset": r[2],
                    "length": r[3],
                    **f,
                    "status": f["status"] or None,
                }
            )
        failures.sort(key=lambda f: f["index"])
        return make_error(failures, total=len(self._requests))


class RangeReader(NativeClientFront):
    """Reads byte ranges of GCS objects into caller memory with many ranged GETs in flight.

    The C++ RangeReader (libcurl multi, ``num_threads`` worker threads, HTTP/1.1 keep-alive
    connections) issues ``GET {endpoint}/download/storage/v1/b/{bucket}/o/{object}?alt=media``
    with ``Range: bytes=a-b``. Ranges of one object whose gap is <= ``coalesce_gap_bytes`` are
    fetched by one GET and scattered into their destinations; fetches longer than
    ``chunk_bytes`` are split and fetched in parallel (a small submit is cut finer, down to
    ``min_chunk_bytes``, to fill half of ``max_inflight_requests``). Every answer is checked
    (206 with a matching ``Content-Range`` and the exact byte count); failures are retried per
    ``retry`` (see RetryPolicy), asking only for the missing bytes, never an empty or inverted
    range. A 200 with the whole object (what GCS sends for gzip-transcoded objects) gives
    exactly the range's bytes when the body reaches that far (``stats()`` counts it in
    ``whole_object_answers`` and ``bytes_discarded``), else fails at once as "range not
    honoured". When a GET that coalesced several requests meets the object's end, only the
    requests reaching past the end fail; the others are delivered. Every error says how far
    the failed GET got (bytes received, offset reached) and names no credential.

    Every byte checked, where the object has block checksums (``RangeRequest.checksums``, a
    ``BlockSums``): its ranges are widened to whole blocks, and each block's CRC-32C is
    computed in C++ as its bytes stream into the destinations (same pass, GIL released). A
    block that does not match is fetched once more (corruption in transit); a second mismatch
    fails the requests it serves with cause ``crc32c_mismatch`` and the failure names the
    block's byte range, the expected and the computed CRC-32C (``block_offset``,
    ``block_length``, ``expected_crc32c``, ``computed_crc32c``). A failed request's
    destination may hold wrong bytes and must not be used.

    One version per object per submit: every GET of an object in one ``submit`` (all its
    coalesced and split parts, and their retries) reads one generation, the request's
    ``generation`` if given, else the one the first answer names in ``x-goog-generation``.
    Once known it is sent as ``generation=`` on every later GET of the object, and every
    answer's ``x-goog-generation`` is checked against it. An answer with another generation,
    or HTTP 404 / 412 for the pinned generation, fails those requests with
    ``ObjectChangedError`` ("object changed during read", both generations when known): bytes
    of two versions are never returned as a success. Not covered: an endpoint whose answers
    name no generation, unless the request names one and the endpoint honours
    ``generation=`` (GCS and ``gcsckpt.testing.LocalGCS`` do both).

    Args:
        endpoint: GCS endpoint; None -> ``$STORAGE_EMULATOR_HOST`` -> storage.googleapis.com.
        max_inflight_requests: HTTP requests running at once (all threads).
        max_inflight_bytes: bytes still wanted by running requests, summed (bytes). Data goes
            straight into the destinations, so this bounds outstanding work, not buffering.
        chunk_bytes: longest single GET (bytes).
        coalesce_gap_bytes: largest hole (bytes) fetched to join neighbouring ranges.
        min_chunk_bytes: a submit whose bytes would make fewer than max_inflight_requests / 2
            GETs of chunk_bytes is cut into shorter GETs, down to this length (bytes), so that
            it still keeps many requests in flight (added to the contract).
        retry: RetryPolicy.
        token_provider: callable returning an OAuth2 access token (str, or a
            (token, expires_at_epoch_s) tuple); None -> Application Default Credentials.
            Called with the GIL held, cached until near expiry (a bare str for 60 s).
        connect_timeout_s: TCP/TLS connect limit per attempt (seconds).
        stall_timeout_s: an attempt that receives no byte for this long is retried (seconds).
        num_threads: worker threads, each driving one curl multi handle (added to the contract).
        recv_buffer_bytes: libcurl receive buffer per request (bytes).
        send_token: None -> send a token when ``token_provider`` is given (to any endpoint),
            else unless the endpoint is an emulator (``is_emulator_endpoint``); True/False
            forces it. 401/403 errors name the credential source and the endpoint.

    Defaults come from //bench:range_read; see ``gcsckpt.io.defaults``.

    Raises:
        ValueError: an option is out of range (the message names it).
        google.auth.exceptions.DefaultCredentialsError: a token is needed, none was given and
            no ADC is configured.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        max_inflight_requests: int = defaults.MAX_INFLIGHT_REQUESTS,
        max_inflight_bytes: int = defaults.MAX_INFLIGHT_BYTES,
        chunk_bytes: int = defaults.CHUNK_BYTES,
        coalesce_gap_bytes: int = defaults.COALESCE_GAP_BYTES,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, shared safely
        token_provider: Callable[[], str] | None = None,
        connect_timeout_s: float = defaults.CONNECT_TIMEOUT_S,
        stall_timeout_s: float = defaults.STALL_TIMEOUT_S,
        num_threads: int = defaults.NUM_THREADS,
        min_chunk_bytes: int = defaults.MIN_CHUNK_BYTES,
        recv_buffer_bytes: int = defaults.RECV_BUFFER_BYTES,
        send_token: bool | None = None,
    ):
        self.endpoint = resolve_endpoint(endpoint)
        check_client_options(
            retry,
            {
                "max_inflight_requests": max_inflight_requests,
                "max_inflight_bytes": max_inflight_bytes,
                "chunk_bytes": chunk_bytes,
                "min_chunk_bytes": min_chunk_bytes,
                "num_threads": num_threads,
            },
        )
        if int(coalesce_gap_bytes) != coalesce_gap_bytes or coalesce_gap_bytes < 0:
            raise ValueError(f"coalesce_gap_bytes must be an int >= 0, got {coalesce_gap_bytes!r}")
        self.retry = retry
        self._options = {
            "max_inflight_requests": int(max_inflight_requests),
            "max_inflight_bytes": int(max_inflight_bytes),
            "chunk_bytes": int(chunk_bytes),
            "coalesce_gap_bytes": int(coalesce_gap_bytes),
            "min_chunk_bytes": int(min_chunk_bytes),
            "num_threads": int(num_threads),
            "connect_timeout_s": float(connect_timeout_s),
            "stall_timeout_s": float(stall_timeout_s),
            "recv_buffer_bytes": int(recv_buffer_bytes),
        }
        self._reader, self.credential_description = start_native_client(
            _gcsio.RangeReader, self.endpoint, retry, token_provider, send_token, self._options
        )

    def submit(self, requests: Sequence[RangeRequest]) -> ReadHandle:
        """Starts reading ``requests``; returns at once.

        Each ``dest`` is held (buffer export) until the handle finishes; for torch tensors the
        bytes are written through a uint8 view of their storage.

        Raises:
            ValueError / TypeError: a malformed request (names its index and gs:// range).
            RuntimeError: the token provider failed, or the reader is closed.
        """
        items = [
            r if not type(r[4]).__module__.startswith("torch") else _with_buffer(r, i)
            for i, r in enumerate(requests)
        ]
        return ReadHandle(self._reader.submit(items), requests)

    def read(self, requests: Sequence[RangeRequest]) -> None:
        """Reads every request into its ``dest``; blocks with the GIL released.

        Raises:
            RangeReadError: listing every request that failed for good (after retries);
                ``ObjectChangedError`` when an object was replaced during the read;
                ``ObjectNotFoundError`` (also a FileNotFoundError) when all failures are 404s.
        """
        self.submit(requests).wait()

    def stats(self) -> dict:
        """Counters since the last reset.

        Keys: requests (HTTP attempts), bytes_received (body bytes), bytes_delivered (bytes
        written into destinations), retries, retries_by_cause (dict cause -> count, causes like
        ``http_503``, ``connection_reset``, ``stall``, ``short_body``, ``bad_content_range``),
        failures, whole_object_answers (200s with the whole object for a ranged GET),
        bytes_discarded (their bytes outside the range), connections_opened,
        connections_reused (attempts on an open connection),
        latency_p50_s / _p90_s / _p99_s (whole successful attempts, seconds),
        ttfb_p50_s / _p90_s / _p99_s (time to first byte, seconds).
        """
        return self._reader.stats()

    def reset_stats(self) -> None:
        """Zeroes every counter of ``stats()``."""
        self._reader.reset_stats()

    def close(self) -> None:
        """Stops the worker threads once no handle is alive; later calls raise RuntimeError."""
        self._reader.close()


def _with_buffer(request, index: int):
    buf = as_writable_buffer(request[4], index)
    return (*request[:4], buf, *request[5:])
