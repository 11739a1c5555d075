"""Bearer tokens: sent only where they belong (an explicit token_provider to any endpoint, the
automatic default never to an emulator), cached, never in errors or repr; 401/403 errors name the
status, endpoint and credential source; ADC provider."""

from __future__ import annotations

import datetime
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import google.auth.credentials
import pytest

from gcsckpt.io import (
    GoogleAuthTokenProvider,
    ObjectStore,
    ObjectStoreError,
    RangeReader,
    RangeReadError,
    RangeRequest,
    Uploader,
    UploadError,
)

SECRET = "ya29.SECRET-TOKEN-do-not-print"
BLOB = bytes(range(256)) * 64


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.auth_headers: list[str | None] = []
        self.status = 206


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Recorder

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.auth_headers.append(self.headers.get("Authorization"))
        if self.server.status != 206:
            body = b'{"error": {"message": "denied"}}'
            self.send_response(self.server.status)
        else:
            first, last = map(int, re.match(r"bytes=(\d+)-(\d+)", self.headers["Range"]).groups())
            body = BLOB[first : last + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(BLOB)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # an upload's session start: answered with the status set
        self.server.auth_headers.append(self.headers.get("Authorization"))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"error": {"code": %d, "message": "denied"}}' % self.server.status
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def recorder():
    server = _Recorder()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def endpoint_of(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def ranges(n: int):
    return [RangeRequest("b", "o", i * 100, 50, bytearray(50)) for i in range(n)]


def test_no_token_to_an_emulator_by_default(recorder, monkeypatch):
    # No token_provider given: a non-googleapis endpoint counts as an emulator and gets none
    # (ADC is never loaded); send_token=False keeps even a given provider's token back.
    calls = []

    def provider():
        calls.append(1)
        return SECRET

    with RangeReader(endpoint_of(recorder), coalesce_gap_bytes=0) as reader:
        reader.read(ranges(2))
        assert reader.credential_description.startswith("anonymous (emulator endpoint) at ")
    with RangeReader(endpoint_of(recorder), token_provider=provider, send_token=False) as r:
        r.read(ranges(1))
        assert r.credential_description.startswith("anonymous (send_token=False) at ")
    assert recorder.auth_headers == [None] * 3
    assert calls == []


def test_a_given_token_provider_reaches_any_endpoint(recorder):
    # A private endpoint or gateway (here 127.0.0.1) gets the token the caller passed.
    def provider():
        return SECRET

    with RangeReader(endpoint_of(recorder), token_provider=provider, coalesce_gap_bytes=0) as r:
        r.read(ranges(3))
        assert r.credential_description == (
            "token_provider passed by the caller "
            "(test_a_given_token_provider_reaches_any_endpoint.<locals>.provider) at "
            + endpoint_of(recorder)
        )
    assert recorder.auth_headers == [f"Bearer {SECRET}"] * 3
    recorder.auth_headers.clear()
    recorder.status = 401
    with ObjectStore(endpoint_of(recorder), token_provider=provider) as store:
        with pytest.raises(ObjectStoreError) as info:
            store.stat("b", "o")
    assert recorder.auth_headers and set(recorder.auth_headers) == {f"Bearer {SECRET}"}
    recorder.auth_headers.clear()
    with Uploader(endpoint_of(recorder), token_provider=provider) as uploader:
        with pytest.raises(UploadError) as upload_info:
            uploader.upload("b", "o", b"data")
    assert recorder.auth_headers == [f"Bearer {SECRET}"]
    for error in (info.value, upload_info.value):
        text = str(error)
        assert "HTTP 401" in text and "token_provider passed by the caller" in text, text
        assert endpoint_of(recorder) in text and SECRET not in text, text


def test_anonymous_401_names_status_and_source_not_a_refresh(recorder):
    # google-auth's AnonymousCredentials cannot refresh; the store reports the 401 as it came.
    recorder.status = 401
    with ObjectStore(endpoint_of(recorder)) as store:
        with pytest.raises(ObjectStoreError) as info:
            store.stat("b", "o")
    text = str(info.value)
    assert "HTTP 401" in text and "cannot be refreshed" not in text, text
    assert f"anonymous (emulator endpoint) at {endpoint_of(recorder)}" in text, text
    assert recorder.auth_headers == [None]


def test_token_is_sent_and_cached(recorder):
    calls = []

    def provider():
        calls.append(1)
        return SECRET

    with RangeReader(
        endpoint_of(recorder), token_provider=provider, send_token=True, coalesce_gap_bytes=0
    ) as reader:
        requests = ranges(20)
        reader.read(requests)
        reader.read(ranges(5))
        assert SECRET not in repr(reader)
    assert recorder.auth_headers == [f"Bearer {SECRET}"] * 25
    assert len(calls) == 1  # cached (a bare str is kept for 60 s)
    for r in requests:
        assert bytes(r.dest) == BLOB[r.offset : r.offset + r.length]


def test_expiring_token_is_refreshed(recorder):
    now = datetime.datetime.now(datetime.UTC).timestamp()
    tokens = iter([("old-token", now + 1.0), ("new-token", now + 3600)])
    with RangeReader(
        endpoint_of(recorder), token_provider=lambda: next(tokens), send_token=True
    ) as reader:
        reader.read(ranges(1))  # a token with 1 s left is refreshed at half its lifetime
        time.sleep(0.6)
        reader.read(ranges(1))
    assert recorder.auth_headers == ["Bearer old-token", "Bearer new-token"]


@pytest.mark.parametrize("status", [401, 403])
def test_permission_errors_name_the_credential_not_the_token(recorder, status):
    recorder.status = status

    class Provider:
        description = "reader@project.iam.gserviceaccount.com"

        def __call__(self):
            return SECRET

    with RangeReader(endpoint_of(recorder), token_provider=Provider(), send_token=True) as reader:
        with pytest.raises(RangeReadError) as info:
            reader.read(ranges(1))
        assert reader.stats()["retries"] == 0
    text = str(info.value) + repr(info.value) + repr(info.value.failures)
    assert f"HTTP {status} permission denied" in text
    assert "reader@project.iam.gserviceaccount.com" in text
    assert SECRET not in text


def test_failing_provider_is_reported(recorder):
    def provider():
        raise PermissionError("metadata server said no")

    with RangeReader(endpoint_of(recorder), token_provider=provider, send_token=True) as reader:
        with pytest.raises(RuntimeError, match="PermissionError: metadata server said no"):
            reader.read(ranges(1))
    assert recorder.auth_headers == []


class _FakeCredentials(google.auth.credentials.Credentials):
    """Credentials whose refresh mints numbered tokens valid for `lifetime_s`."""

    def __init__(self, lifetime_s: float):
        super().__init__()
        self.lifetime_s = lifetime_s
        self.refreshes = 0

    def refresh(self, request):
        self.refreshes += 1
        self.token = f"{SECRET}-{self.refreshes}"
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        self.expiry = now + datetime.timedelta(seconds=self.lifetime_s)


def test_google_auth_provider_refreshes_before_expiry():
    fresh = _FakeCredentials(lifetime_s=3600)
    provider = GoogleAuthTokenProvider(fresh)
    token, expiry = provider.token_with_expiry()
    assert provider() == token == f"{SECRET}-1"
    assert fresh.refreshes == 1
    assert expiry == pytest.approx(datetime.datetime.now(datetime.UTC).timestamp() + 3600, abs=5)
    # A token with less than the 300 s margin left is refreshed on every call.
    short = _FakeCredentials(lifetime_s=100)
    provider = GoogleAuthTokenProvider(short)
    provider()
    provider()
    assert short.refreshes == 2
    assert SECRET not in repr(provider) and "_FakeCredentials" in provider.description
    # Credentials passed in are not Application Default Credentials.
    assert provider.description == "_FakeCredentials (passed by the caller)"
