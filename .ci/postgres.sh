#!/usr/bin/env bash
# A PostgreSQL server for the tests that share one Optuna study between workers.
#
# Idempotent: installs the Debian `postgresql` package if it is missing, makes
# a private cluster (its own data directory, loopback only, its own port) if
# there is none, starts it if it is not running, and creates the role and the
# database if they do not exist. Needs root (CI runs as root).
#
# Prints exactly one line on stdout, the URL for BOOTSTORM_TEST_POSTGRES_URL;
# everything else goes to stderr. Usage:
#   export BOOTSTORM_TEST_POSTGRES_URL="$(.ci/postgres.sh)"
#   .ci/postgres.sh stop      # stop the cluster (keeps its data)
set -euo pipefail

PORT="${BOOTSTORM_PG_PORT:-55432}"
ROOT="${BOOTSTORM_PG_DIR:-/var/tmp/bootstorm-pg}"
DATA="$ROOT/data"
USER_NAME=bootstorm
PASSWORD=bootstorm
DB=bootstorm

# A test server: a commit need not wait for the disk (a crash of the machine
# may lose the last trials of a test study, never corrupt it).
FAST="-c synchronous_commit=off"

log() { echo "postgres.sh: $*" >&2; }

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    log "installing postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q postgresql >&2 || { apt-get update -q >&2 && apt-get install -y -q postgresql >&2; }
fi
BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
as_pg() { runuser -u postgres -- "$@"; }

if [[ "${1:-}" == "stop" ]]; then
    as_pg "$BIN/pg_ctl" -D "$DATA" -m fast stop >&2 || true
    exit 0
fi

mkdir -p "$ROOT"
chown postgres:postgres "$ROOT"
if [[ ! -f "$DATA/PG_VERSION" ]]; then
    log "initdb $DATA"
    as_pg "$BIN/initdb" -D "$DATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        -E UTF8 >&2
fi
# The server outlives this script: it must not keep the caller's descriptors
# (a CI runner's log pipe held open by the postmaster never reaches EOF, and
# the step that started it never ends). Its own output goes to server.log.
detached() {
    (
        for fd in /proc/"$BASHPID"/fd/*; do
            n="${fd##*/}"
            if [[ "$n" -gt 2 ]]; then eval "exec $n>&-"; fi
        done
        exec "$@"
    ) </dev/null >&2  # pg_ctl's own lines; it gives the server server.log
}
if ! as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    log "starting on 127.0.0.1:$PORT"
    detached runuser -u postgres -- "$BIN/pg_ctl" -D "$DATA" -l "$ROOT/server.log" -w -t 60 \
        -o "-p $PORT -c listen_addresses=127.0.0.1 -k $ROOT -c max_connections=200 $FAST" start \
        || { log "the server did not start; see $ROOT/server.log"; exit 1; }
fi

psql_pg() { as_pg "$BIN/psql" -h "$ROOT" -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -qtA "$@"; }
if [[ "$(psql_pg -c "SELECT 1 FROM pg_roles WHERE rolname = '$USER_NAME'")" != "1" ]]; then
    psql_pg -c "CREATE ROLE $USER_NAME LOGIN PASSWORD '$PASSWORD'" >&2
fi
if [[ "$(psql_pg -c "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != "1" ]]; then
    psql_pg -c "CREATE DATABASE $DB OWNER $USER_NAME" >&2
fi

echo "postgresql+psycopg://$USER_NAME:$PASSWORD@127.0.0.1:$PORT/$DB"
