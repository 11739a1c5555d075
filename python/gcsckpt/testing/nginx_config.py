"""The nginx configuration in front of the GCS server: media reads from disk, the rest proxied.

Media reads (`GET [/download]/storage/v1/b/B/o/O?alt=media`) and XML reads (`GET|HEAD /B/O`)
are nginx's static module serving `<data>/.cloudstorage/B/O`, where the server writes object
O: nginx percent-decodes the URI (%2F becomes '/'), `merge_slashes off` keeps 'a//b', and the
kernel resolves 'a//b' and a leading '/' as the server's path rule does (checked for '/',
'//', spaces, unicode, %, +, #, ?, ;, &). `generation=G` / `ifGenerationMatch=G` reads come
from the version's hard link `<data>/.generations/B/G/O` (absent: 404 / 412, as GCS without
versioning); `x-goog-generation` is copied from nginx's own ETag (the file's mtime spells the
generation), so reads keep the static module's speed. Upload bodies (`/upload/...`, XML
PUT/POST) are written to files under `<data>/.uploads/nginx`; the server gets the headers,
`X-Gcsckpt-Body-File` (the path) and `X-Gcsckpt-Elapsed` (for the upload latency model) and
links the file into place, so no upload byte crosses a socket into Python
(docs/measurements.md). Everything else goes to the server unchanged (the raw request URI).
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import re

from gcsckpt.testing.server_http import (
    BODY_FILE_HEADER,
    ELAPSED_HEADER,
    JSON_API_ROOTS,
    LONG_SEGMENT_MARK,
    UPLOADS_DIR,
)

NGINX_BIN = "/usr/sbin/nginx"
ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"

# Largest send nginx makes between two pacing sleeps when a rate cap is on, bytes.
PACED_CHUNK_BYTES = 256 * 1024

# nginx's read buffer for an upload body it writes to a file, bytes (default 16 KiB).
UPLOAD_BODY_BUFFER_BYTES = 1 << 20

# Written as one line per media read; parsed by media_log.py (tab separated).
MEDIA_LOG_FORMAT = "$msec\\t$status\\t$body_bytes_sent\\t$request_time\\t$http_range\\t$request_uri"

_PRECONDITION_BODY = (
    '{"error":{"code":412,"message":"Precondition Failed: the object generation differs.",'
    '"errors":[{"domain":"global","reason":"conditionNotMet","message":"Precondition Failed"}]}}'
)

# XML API object paths: /BUCKET/OBJECT with any first segment but the JSON API's roots.
_XML_PATH = rf"^/(?!(?:{'|'.join(JSON_API_ROOTS)})/)(?<gcs_bucket>[^/]+)/(?<gcs_object>.+)$"

_XML_NOT_FOUND_BODY = (
    "<?xml version='1.0' encoding='UTF-8'?><Error><Code>NoSuchKey</Code>"
    "<Message>The specified key does not exist.</Message><Details>No such object.</Details></Error>"
)

_NOT_FOUND_BODY = (
    '{"error":{"code":404,"message":"No such object or bucket.",'
    '"errors":[{"domain":"global","reason":"notFound","message":"No such object or bucket."}]}}'
)


@dataclasses.dataclass(frozen=True)
class NginxSettings:
    """What the generated config needs.

    Attributes:
      listen_port: nginx's port on 127.0.0.1.
      server_port: the GCS server's port on 127.0.0.1.
      objects_root: absolute path of `<data>/.cloudstorage`.
      run_dir: absolute folder for pid and temp files.
      log_dir: absolute folder for `nginx_error.log` and `nginx_media_access.log`.
      latency_s: first-byte delay added to every media read, seconds (0: none).
      rate_bytes_per_s: per-request bandwidth cap on media reads, bytes/s (0: none).
      workers: nginx worker processes.
    """

    listen_port: int
    server_port: int
    objects_root: str
    run_dir: str
    log_dir: str
    latency_s: float = 0.0
    rate_bytes_per_s: int = 0
    workers: int = 2

    @property
    def upload_body_dir(self) -> str:
        """Where nginx writes upload bodies: `<data>/.uploads/nginx` (server_http.py)."""
        return os.path.join(os.path.dirname(self.objects_root), UPLOADS_DIR, "nginx")

    @property
    def generations_dir(self) -> str:
        """`<data>/.generations`: one hard link per live version, `B/G/O`."""
        return os.path.join(os.path.dirname(self.objects_root), ".generations")

    @property
    def error_log(self) -> str:
        return os.path.join(self.log_dir, "nginx_error.log")

    @property
    def media_log(self) -> str:
        return os.path.join(self.log_dir, "nginx_media_access.log")

    @property
    def pid_file(self) -> str:
        return os.path.join(self.run_dir, "nginx.pid")


def _quoted(path: str) -> str:
    """A path as an nginx string literal; rejects characters nginx would interpret."""
    bad = [c for c in '"\\$;{}\n\r' if c in path]
    if bad:
        raise ValueError(f"path {path!r} contains {bad!r}, which nginx config strings cannot hold")
    return f'"{path}"'


def _user_line() -> str:
    """As root, run workers as root too: they must read data dirs made by mkdtemp (mode 0700).

    As any other user nginx cannot switch users, and the directive would only warn.
    """
    if os.geteuid() != 0:
        return ""
    return f"user {pwd.getpwuid(0).pw_name};"


def render(s: NginxSettings) -> str:
    """The complete nginx.conf text for `s` (run with `-p run_dir -c <file> -g 'daemon off;'`)."""
    temp = {
        k: _quoted(os.path.join(s.run_dir, k)) for k in ("body", "proxy", "fcgi", "uwsgi", "scgi")
    }
    delay_module = f"load_module {_quoted(ECHO_MODULE)};" if s.latency_s > 0 else ""
    # auth_request runs before the content phase, so the static module still owns Range handling.
    delay_check = "auth_request /__first_byte_delay;" if s.latency_s > 0 else ""
    delay_location = (
        f"location = /__first_byte_delay {{ internal; echo_sleep {max(s.latency_s, 0.001):.3f}; }}"
        if s.latency_s > 0
        else ""
    )
    # nginx paces by sleeping (bytes just sent / rate) after each send; small sends keep the pace
    # even (a response's last 256 KiB arrives unpaced).
    rate = (
        f"limit_rate {s.rate_bytes_per_s}; sendfile_max_chunk {PACED_CHUNK_BYTES};"
        if s.rate_bytes_per_s > 0
        else ""
    )
    proxy_plain = (
        "proxy_pass http://gcs_server; proxy_http_version 1.1; "
        'proxy_set_header Connection ""; proxy_set_header Host $http_host; '
        "proxy_read_timeout 600s; proxy_send_timeout 600s;"
    )
    # JSON API answers: 404s get GCS's JSON body; XML ones keep their own.
    proxy = f"{proxy_plain} proxy_intercept_errors on; error_page 404 = @not_found;"
    # Uploads: nginx keeps the body in a file on the data disk and sends the server its path
    # (and how long the request has run, for the latency model of upload answers).
    upload_body = (
        f"client_body_temp_path {_quoted(s.upload_body_dir)}; client_body_in_file_only clean; "
        # Large reads of the body: fewer recv/write calls per upload.
        f"client_body_buffer_size {UPLOAD_BODY_BUFFER_BYTES}; "
        'proxy_pass_request_body off; proxy_set_header Content-Length ""; '
        f"proxy_set_header {BODY_FILE_HEADER} $request_body_file; "
        f"proxy_set_header {ELAPSED_HEADER} $request_time;"
    )
    # What every media answer gets, whichever generation it serves: logged, delayed and paced
    # like GCS, with its generation, and GCS's 404 body.
    media_answer = (
        f"access_log {_quoted(s.media_log)} gcs_media; {delay_check} {rate} "
        "add_header x-goog-generation $gcs_generation; error_page 404 = @not_found;"
    )
    return f"""
{delay_module}
{_user_line()}
worker_processes {s.workers};
pid {_quoted(s.pid_file)};
error_log {_quoted(s.error_log)} notice;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  log_format gcs_media "{MEDIA_LOG_FORMAT}";
  client_body_temp_path {temp["body"]};
  proxy_temp_path {temp["proxy"]};
  fastcgi_temp_path {temp["fcgi"]};
  uwsgi_temp_path {temp["uwsgi"]};
  scgi_temp_path {temp["scgi"]};
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  merge_slashes off;
  server_tokens off;
  default_type application/octet-stream;
  client_max_body_size 0;
  recursive_error_pages on;
  # A name with a segment over 255 bytes (or one starting with the mark) is stored under a
  # hashed file name (server_objects.py) nginx cannot derive: its media reads go to the server.
  map $gcs_object $gcs_long_name {{
    "~(^|/)([^/]{{256}}|{re.escape(LONG_SEGMENT_MARK)})" 1; default "";
  }}
  map "$request_method:$arg_alt:$gcs_long_name" $gcs_is_media {{
    "GET:media:" 1; "HEAD:media:" 1; default "";
  }}
  # XML API object reads: GET/HEAD /BUCKET/OBJECT that are not about a multipart upload.
  map "$request_method:$arg_uploadid" $gcs_is_xml_read {{ "GET:" 1; "HEAD:" 1; default ""; }}
  # generation= / ifGenerationMatch= of a media read: digits only (anything else is a 400).
  map $arg_generation $gcs_want_generation {{
    "" ""; "~^[0-9]{{1,19}}$" $arg_generation; default "bad";
  }}
  map $arg_ifgenerationmatch $gcs_if_generation {{
    "" ""; "~^[0-9]{{1,19}}$" $arg_ifgenerationmatch; default "bad";
  }}
  # The ETag nginx makes from the file it serves is "<mtime hex>-<size hex>"; the mtime's hex
  # digits are the generation's decimal digits (see server_objects.py).
  map $sent_http_etag $gcs_generation {{ "~^.(?<gcs_gen>[0-9]+)-" $gcs_gen; default ""; }}
  upstream gcs_server {{ server 127.0.0.1:{s.server_port}; keepalive 16; }}
  server {{
    listen 127.0.0.1:{s.listen_port} backlog=4096;
    location ~ ^/(?:download/)?storage/v1/b/(?<gcs_bucket>[^/]+)/o/(?<gcs_object>.+)$ {{
      error_page 418 = @media;
      if ($gcs_is_media) {{ return 418; }}
      {proxy}
    }}
    # The XML API: /BUCKET/OBJECT, any first segment but the JSON API's (server_main.py).
    location ~ {_XML_PATH} {{
      error_page 418 = @xml_read;
      if ($gcs_is_xml_read) {{ return 418; }}
      {proxy_plain} {upload_body}
    }}
    location /upload/ {{ {proxy} {upload_body} }}
    location @xml_read {{
      root {_quoted(s.objects_root)};
      {media_answer.replace("@not_found", "@xml_not_found")}
      error_page 419 = @xml_read_generation;
      if ($gcs_want_generation = bad) {{ return 400; }}
      if ($gcs_want_generation) {{ return 419; }}
      try_files /$gcs_bucket/$gcs_object =404;
    }}
    location @xml_read_generation {{
      root {_quoted(s.generations_dir)};
      {media_answer.replace("@not_found", "@xml_not_found")}
      try_files /$gcs_bucket/$gcs_want_generation/$gcs_object =404;
    }}
    location @xml_not_found {{
      access_log {_quoted(s.media_log)} gcs_media;
      default_type application/xml;
      return 404 "{_XML_NOT_FOUND_BODY}";
    }}
    location @media {{
      root {_quoted(s.objects_root)};
      {media_answer}
      error_page 419 = @media_generation;
      error_page 420 = @media_if_generation;
      if ($gcs_want_generation = bad) {{ return 400; }}
      if ($gcs_if_generation = bad) {{ return 400; }}
      if ($gcs_want_generation) {{ return 419; }}
      if ($gcs_if_generation) {{ return 420; }}
      try_files /$gcs_bucket/$gcs_object =404;
    }}
    location @media_generation {{
      root {_quoted(s.generations_dir)};
      {media_answer}
      try_files /$gcs_bucket/$gcs_want_generation/$gcs_object =404;
    }}
    location @media_if_generation {{
      root {_quoted(s.generations_dir)};
      {media_answer}
      error_page 412 = @precondition_failed;
      try_files /$gcs_bucket/$gcs_if_generation/$gcs_object =412;
    }}
    location @precondition_failed {{
      access_log {_quoted(s.media_log)} gcs_media;
      default_type application/json;
      return 412 '{_PRECONDITION_BODY}';
    }}
    {delay_location}
    location @not_found {{
      access_log {_quoted(s.media_log)} gcs_media if=$gcs_is_media;
      default_type application/json;
      return 404 '{_NOT_FOUND_BODY}';
    }}
    location / {{ {proxy} }}
  }}
}}
"""
