#!/usr/bin/env bash
# An MLflow tracking server on PostgreSQL 15, on 127.0.0.1 only: tracking.sh up|down|add-user NAME
#
# `up` prints the tracking URI (http://127.0.0.1:PORT) as the last line of stdout; everything else goes
# to stderr. State (database cluster, artifacts, logs, pid and port files) lives in $NNBENCH_TRACKING_DIR
# (default /tmp/nnbench-tracking). The server runs with $PYTHON (default: python on PATH), which needs
# mlflow and psycopg 3 (pip install 'psycopg[binary]'). `up` while up prints the same URI.
#
# NNBENCH_TRACKING_AUTH=1 tracking.sh up: MLflow's basic-auth app (pip install 'mlflow[auth]'), its users in
# the database mlflow_auth, with a generated secret key and admin password (the files secret_key and
# admin.password, which only their owner reads). Every user may read and log to every experiment
# (default_permission EDIT). `add-user NAME` creates user NAME with a generated password and prints the path
# of NAME's credentials file, in ~/.mlflow/credentials' format.
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
secret() { [[ -s $1 ]] || (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$1"); }
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
  local db
  for db in mlflow mlflow_auth; do
    [[ $(psql_ -c "SELECT 1 FROM pg_database WHERE datname = '$db'") == 1 ]] || psql_ -q -c "CREATE DATABASE $db"
  done
}

# auth_cache_ttl_seconds: the one worker checks a user's password hash (tens of ms of CPU by design) once a minute,
# not on every request: a sweep logs with hundreds of requests.
auth_config() {  # the basic-auth app's settings, its secret key and its admin password
  "$PYTHON" -c 'import flask_wtf' 2>/dev/null ||
    die "$PYTHON lacks the basic-auth app's Flask-WTF: pip install 'mlflow[auth]'"
  secret "$DIR/secret_key"
  secret "$DIR/admin.password"
  cat >"$DIR/basic_auth.ini" <<EOF
[mlflow]
default_permission = EDIT
database_uri = postgresql://postgres@127.0.0.1:$(cat "$DIR/pg.port")/mlflow_auth
admin_username = admin
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
auth_cache_ttl_seconds = 60
EOF
}

start_mlflow() {
  alive "$DIR/mlflow.pid" && return
  "$PYTHON" -c 'import mlflow, psycopg' 2>/dev/null ||
    die "$PYTHON cannot import mlflow and psycopg 3: pip install mlflow 'psycopg[binary]'"
  [[ -s $DIR/mlflow.port ]] || free_port >"$DIR/mlflow.port"
  mkdir -p "$DIR/artifacts"
  local auth=()
  if [[ -n ${NNBENCH_TRACKING_AUTH:-} ]]; then
    auth_config
    auth=(--app-name basic-auth)
    MLFLOW_FLASK_SERVER_SECRET_KEY=$(cat "$DIR/secret_key")
    MLFLOW_AUTH_ADMIN_PASSWORD=$(cat "$DIR/admin.password")  # read at the first start only, to create admin
    export MLFLOW_AUTH_CONFIG_PATH=$DIR/basic_auth.ini MLFLOW_FLASK_SERVER_SECRET_KEY MLFLOW_AUTH_ADMIN_PASSWORD
  fi
  local uri try
  for try in 1 2 3; do
    # A session of its own, so `down` can stop the server and its workers as one process group.
    # shellcheck disable=SC2016  # $$, $0 and $@ expand in the new session's shell
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false MLFLOW_DISABLE_TELEMETRY=true setsid bash -c \
      'echo $$ >"$0/mlflow.pid"; exec "$@"' "$DIR" "$PYTHON" -m mlflow server \
      --backend-store-uri "postgresql://postgres@127.0.0.1:$(cat "$DIR/pg.port")/mlflow" \
      --artifacts-destination "$DIR/artifacts" --host 127.0.0.1 --port "$(cat "$DIR/mlflow.port")" \
      --workers 1 "${auth[@]}" </dev/null >"$DIR/mlflow.log" 2>&1 &
    uri=http://127.0.0.1:$(cat "$DIR/mlflow.port")
    for _ in $(seq 120); do
      curl -sf "$uri/health" >/dev/null && return
      [[ -s $DIR/mlflow.pid ]] && ! alive "$DIR/mlflow.pid" && break
      grep -q "address already in use" "$DIR/mlflow.log" && break
      sleep 0.5
    done
    # another process took the free port between its choice and the server's bind: start again on a new one
    grep -q "address already in use" "$DIR/mlflow.log" || break
    say "port $(cat "$DIR/mlflow.port") taken meanwhile (try $try of 3): a new one"
    stop_mlflow
    free_port >"$DIR/mlflow.port"
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

add_user() {  # add_user NAME: a user of the basic-auth server, with a generated password; prints its credentials file
  local name=$1 file
  [[ -n $name ]] || die "usage: tracking.sh add-user NAME"
  [[ -s $DIR/admin.password ]] || die "no basic-auth server in $DIR: start one with NNBENCH_TRACKING_AUTH=1 $0 up"
  mkdir -p "$DIR/users"
  file=$DIR/users/$name.credentials
  (umask 077; printf '[mlflow]\nmlflow_tracking_username = %s\nmlflow_tracking_password = %s\n' "$name" \
    "$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$file")
  # As admin, the passwords in the environment and a file: never on a command line, which `ps` shows to all.
  # shellcheck disable=SC2016  # Python's code, not the shell's
  PYTHONWARNINGS=ignore MLFLOW_TRACKING_USERNAME=admin MLFLOW_TRACKING_PASSWORD=$(cat "$DIR/admin.password") \
    "$PYTHON" -c '
import configparser, sys
from mlflow.server import get_app_client
user = configparser.ConfigParser()
user.read(sys.argv[2])
get_app_client("basic-auth", tracking_uri=sys.argv[1]).create_user(user["mlflow"]["mlflow_tracking_username"],
                                                                   user["mlflow"]["mlflow_tracking_password"])
' "http://127.0.0.1:$(cat "$DIR/mlflow.port")" "$file" >&2 || die "could not create user $name (log: $DIR/mlflow.log)"
  say "user $name created; its credentials file (copy it to ~/.mlflow/credentials, or export them):"
  echo "$file"
}

stop_mlflow() {  # the server's process group: SIGTERM, then SIGKILL after 20 s
  if alive "$DIR/mlflow.pid"; then
    kill -TERM -- "-$(cat "$DIR/mlflow.pid")" 2>/dev/null || true
    for _ in $(seq 40); do alive "$DIR/mlflow.pid" || break; sleep 0.5; done
    if alive "$DIR/mlflow.pid"; then kill -KILL -- "-$(cat "$DIR/mlflow.pid")"; fi
  fi
  rm -f "$DIR/mlflow.pid"
}

down() {
  stop_mlflow
  if alive "$DIR/pg/postmaster.pid"; then
    as_pg "$PG/pg_ctl" -D "$DIR/pg" -m fast -w stop >&2
  fi
  say "down"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  add-user) add_user "${2:-}" ;;
  *) echo "usage: $0 up|down|add-user NAME" >&2; exit 2 ;;
esac
