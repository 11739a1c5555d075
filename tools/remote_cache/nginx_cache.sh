#!/usr/bin/env bash
# A Bazel HTTP remote cache on loopback: Debian's nginx storing WebDAV PUTs under a folder.
#   tools/remote_cache/nginx_cache.sh start DIR   -> prints the --remote_cache URL
#   tools/remote_cache/nginx_cache.sh stop DIR
# Bazel's HTTP cache protocol is plain GET/PUT of /ac/<hash> and /cas/<hash> under the URL.
set -euo pipefail

action="${1:?usage: nginx_cache.sh start|stop DIR}"
dir="${2:?usage: nginx_cache.sh start|stop DIR}"
nginx_bin="${NGINX:-/usr/sbin/nginx}"

stop() {
  if [[ -f "$dir/nginx.pid" ]]; then
    "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null || kill "$(cat "$dir/nginx.pid")" 2>/dev/null || true
    rm -f "$dir/nginx.pid"
  fi
}

start() {
  [[ -x "$nginx_bin" ]] || { echo "nginx_cache: $nginx_bin missing (apt-get install nginx)" >&2; exit 1; }
  mkdir -p "$dir/store/bazel" "$dir/client_body"
  local port user=""
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  if [[ "$(id -u)" == 0 ]]; then
    # As root, nginx's workers would drop to nobody/www-data and could not write a store
    # inside a 0700 temp folder (PUT answers 500): keep them root, on loopback only.
    user="user root;"
  fi
  cat >"$dir/nginx.conf" <<CONF
$user
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 512; }
http {
  access_log $dir/access.log;
  client_body_temp_path $dir/client_body;
  client_max_body_size 0;
  server {
    listen 127.0.0.1:$port;
    location /bazel/ {
      root $dir/store;
      dav_methods PUT;
      create_full_put_path on;
      dav_access user:rw group:r all:r;
    }
  }
}
CONF
  "$nginx_bin" -p "$dir" -c "$dir/nginx.conf"
  for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$port/bazel/" && break
    sleep 0.1
  done
  echo "http://127.0.0.1:$port/bazel"
}

case "$action" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: nginx_cache.sh start|stop DIR" >&2; exit 2 ;;
esac
