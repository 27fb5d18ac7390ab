#!/usr/bin/env bash
# An MLflow tracking server on PostgreSQL 15, on 127.0.0.1 only: tracking.sh up|down
#
# `up` prints the tracking URI (http://127.0.0.1:PORT) as the last line of stdout; everything else goes
# to stderr. State (database cluster, artifacts, logs, pid and port files) lives in $NNBENCH_TRACKING_DIR
# (default /tmp/nnbench-tracking). The server runs with $PYTHON (default: python on PATH), which needs
# mlflow and psycopg 3 (pip install 'psycopg[binary]'). `up` while up prints the same URI.
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin  # runuser and the daemons, for callers with a user PATH

DIR=${NNBENCH_TRACKING_DIR:-/tmp/nnbench-tracking}
PYTHON=${PYTHON:-python}
PG=/usr/lib/postgresql/15/bin

say() { echo "tracking.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }
alive() { [[ -s $1 ]] && kill -0 "$(head -n 1 "$1" 2>/dev/null)" 2>/dev/null; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p
  for p in $(shuf -i 20000-40000 -n 100); do listening "$p" || { echo "$p"; return; }; done
  die "no free port found"
}
as_pg() { if [[ $EUID -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }  # root: as postgres
psql_() { "$PG/psql" -h 127.0.0.1 -p "$(cat "$DIR/pg.port")" -U postgres -tA "$@"; }

start_postgres() {
  if [[ ! -d $DIR/pg ]]; then
    mkdir -p "$DIR/pg"
    [[ $EUID -eq 0 ]] && chown postgres: "$DIR" "$DIR/pg"
    as_pg test -w "$DIR/pg" || die "the postgres user cannot write $DIR/pg (a parent dir closed to it?): set NNBENCH_TRACKING_DIR"
    as_pg "$PG/initdb" -D "$DIR/pg" -A trust -U postgres -E UTF8 --no-sync >"$DIR/initdb.log" 2>&1 ||
      { tail -n 20 "$DIR/initdb.log" >&2; die "initdb failed"; }
  fi
  alive "$DIR/pg/postmaster.pid" && return
  [[ -s $DIR/pg.port ]] || free_port >"$DIR/pg.port"
  as_pg "$PG/pg_ctl" -D "$DIR/pg" -l "$DIR/postgres.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $(cat "$DIR/pg.port") -k $DIR" start >&2 ||
    { tail -n 20 "$DIR/postgres.log" >&2; die "postgres does not start"; }
  [[ $(psql_ -c "SELECT 1 FROM pg_database WHERE datname = 'mlflow'") == 1 ]] || psql_ -q -c "CREATE DATABASE mlflow"
}

start_mlflow() {
  alive "$DIR/mlflow.pid" && return
  "$PYTHON" -c 'import mlflow, psycopg' 2>/dev/null ||
    die "$PYTHON cannot import mlflow and psycopg 3: pip install mlflow 'psycopg[binary]'"
  [[ -s $DIR/mlflow.port ]] || free_port >"$DIR/mlflow.port"
  mkdir -p "$DIR/artifacts"
  # A session of its own, so `down` can stop the server and its workers as one process group.
  # shellcheck disable=SC2016  # $$, $0 and $@ expand in the new session's shell
  MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false MLFLOW_DISABLE_TELEMETRY=true setsid bash -c \
    'echo $$ >"$0/mlflow.pid"; exec "$@"' "$DIR" "$PYTHON" -m mlflow server \
    --backend-store-uri "postgresql://postgres@127.0.0.1:$(cat "$DIR/pg.port")/mlflow" \
    --artifacts-destination "$DIR/artifacts" --host 127.0.0.1 --port "$(cat "$DIR/mlflow.port")" \
    --workers 1 </dev/null >"$DIR/mlflow.log" 2>&1 &
  local uri
  uri=http://127.0.0.1:$(cat "$DIR/mlflow.port")
  for _ in $(seq 120); do
    curl -sf "$uri/health" >/dev/null && return
    [[ -s $DIR/mlflow.pid ]] && ! alive "$DIR/mlflow.pid" && break
    sleep 0.5
  done
  tail -n 30 "$DIR/mlflow.log" >&2
  die "mlflow server not healthy at $uri (log: $DIR/mlflow.log)"
}

up() {
  mkdir -p "$DIR"
  start_postgres
  start_mlflow
  say "up: mlflow on postgres port $(cat "$DIR/pg.port"), artifacts in $DIR/artifacts, log $DIR/mlflow.log"
  echo "http://127.0.0.1:$(cat "$DIR/mlflow.port")"
}

down() {
  if alive "$DIR/mlflow.pid"; then
    kill -TERM -- "-$(cat "$DIR/mlflow.pid")" 2>/dev/null || true
    for _ in $(seq 40); do alive "$DIR/mlflow.pid" || break; sleep 0.5; done
    if alive "$DIR/mlflow.pid"; then kill -KILL -- "-$(cat "$DIR/mlflow.pid")"; fi
  fi
  rm -f "$DIR/mlflow.pid"
  if alive "$DIR/pg/postmaster.pid"; then
    as_pg "$PG/pg_ctl" -D "$DIR/pg" -m fast -w stop >&2
  fi
  say "down"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
