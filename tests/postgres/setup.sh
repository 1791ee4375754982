#!/usr/bin/env bash
# A PostgreSQL server on loopback for tests/serve_postgres.rs: Debian's package, a cluster of
# its own in a temporary folder owned by the `postgres` user, trust authentication on
# 127.0.0.1 only, one database `kbench`. Prints the URL to give `kbench serve --store`.
set -euo pipefail
PORT="${KBENCH_PG_PORT:-55432}"
DIR="${KBENCH_PG_DIR:-/tmp/kbench-postgres}"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi
BIN="$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if ! as_pg "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
    rm -rf "$DIR"
    mkdir -p "$DIR"
    if [ "$(id -u)" = 0 ]; then chown postgres "$DIR"; fi
    as_pg "$BIN/initdb" -D "$DIR/data" -A trust -U postgres >/dev/null
    as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1" start >/dev/null
fi
as_pg "$BIN/psql" -q -h 127.0.0.1 -p "$PORT" -U postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'kbench'" | grep -q 1 \
    || as_pg "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres kbench
echo "postgres://postgres@127.0.0.1:$PORT/kbench"
