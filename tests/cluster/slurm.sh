#!/usr/bin/env bash
# A single-node SLURM cluster on this host, for the hydra/launcher=slurm tests: slurm.sh up|down|status
#
# Run as root on Debian (it apt-gets slurm-wlm, slurmdbd, munge and mariadb-server-core if missing).
# Everything lives in $NNBENCH_SLURM_DIR (default /tmp/nnbench-slurm): the generated slurm.conf and
# slurmdbd.conf, state, spool, logs and a MariaDB for accounting. /etc/slurm/slurm.conf links to the
# generated file, so sbatch, squeue and submitit need no SLURM_CONF. Accounting (slurmdbd) is there
# because submitit polls `sacct`: without it a job that dies before writing its result leaves the
# launcher waiting forever. `up` twice is harmless; `down` cancels every job and stops all daemons.
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin  # runuser and the daemons, for callers with a user PATH

DIR=${NNBENCH_SLURM_DIR:-/tmp/nnbench-slurm}
CONF=/etc/slurm/slurm.conf
HOST=$(hostname -s)
MARK="# nnbench single-node test cluster"
CRED_EXPIRE_S=15
PACKAGES=(slurm-wlm slurmdbd munge mariadb-server-core mariadb-client-core)

say() { echo "slurm.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }
alive() { [[ -s $1 ]] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }  # the daemon may remove it meanwhile
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
sql() { mariadb --no-defaults --socket="$DIR/mysql.sock" -u root "$@"; }
db_ok() { sql -e 'SELECT 1' >/dev/null 2>&1; }
node_state() { sinfo -h -N -n "$HOST" -o %T 2>/dev/null || true; }
wait_for() {  # wait_for SECONDS WHAT LOG COMMAND...: poll until COMMAND succeeds, else show LOG and fail
  local n=$1 what=$2 log=$3; shift 3
  for _ in $(seq $((n * 5))); do "$@" && return; sleep 0.2; done
  tail -n 20 "$log" >&2 || true
  die "$what not ready after $n s (log: $log)"
}
stop() {  # stop NAME PIDFILE
  alive "$2" || { rm -f "$2"; return 0; }
  kill "$(cat "$2" 2>/dev/null)" 2>/dev/null || true
  for _ in $(seq 60); do alive "$2" || { rm -f "$2"; return 0; }; sleep 0.5; done
  die "$1 (pid $(cat "$2")) does not stop"
}
free_port() {
  local p
  for p in $(shuf -i 20000-40000 -n 100); do listening "$p" || { echo "$p"; return; }; done
  die "no free port found"
}

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  say "installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get install -y -q --no-install-recommends "${missing[@]}")
  { "${apt[@]}" || { apt-get update -q && "${apt[@]}"; }; } >"$DIR/apt.log" 2>&1 ||
    { tail -n 20 "$DIR/apt.log" >&2; die "apt-get failed (log: $DIR/apt.log)"; }
}

start_munge() {
  munge_ok && return
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged
  touch "$DIR/munged.ours"  # `down` stops only a munged that `up` started
  wait_for 10 munged /var/log/munge/munged.log munge_ok
}

start_mariadb() {  # the accounting database, on 127.0.0.1 and a socket in $DIR
  alive "$DIR/mysql.pid" && return
  if [[ ! -d $DIR/mysql ]]; then
    mariadb-install-db --no-defaults --user=root --datadir="$DIR/mysql" --skip-test-db \
      --auth-root-authentication-method=socket >"$DIR/mysql-install.log" 2>&1 ||
      { tail -n 20 "$DIR/mysql-install.log" >&2; die "mariadb-install-db failed"; }
  fi
  [[ -s $DIR/mysql.port ]] || free_port >"$DIR/mysql.port"
  setsid mariadbd --no-defaults --user=root --datadir="$DIR/mysql" --socket="$DIR/mysql.sock" \
    --pid-file="$DIR/mysql.pid" --log-error="$DIR/mysql.log" --bind-address=127.0.0.1 \
    --port="$(cat "$DIR/mysql.port")" --innodb-buffer-pool-size=32M </dev/null >/dev/null 2>&1 &
  wait_for 30 MariaDB "$DIR/mysql.log" db_ok
  sql -e "CREATE USER IF NOT EXISTS slurm@'127.0.0.1' IDENTIFIED BY '$(cat "$DIR/dbpass")';
          GRANT ALL ON slurm_acct_db.* TO slurm@'127.0.0.1';"
}

write_conf() {  # sets CHANGED when slurm.conf differs from the one the daemons read
  local mem_mb old
  old=$(cat "$DIR/slurm.conf" 2>/dev/null || true)
  mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)  # below the real size, or the node drains
  mkdir -p "$DIR/state" "$DIR/spool" /etc/slurm
  cat >"$DIR/slurm.conf" <<EOF
$MARK, written by tests/cluster/slurm.sh up (state dir $DIR)
ClusterName=nnbench
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job may start cred_expire + 1 s after its previous run ended (120 s by default): short here, where
# every credential is used on this host within seconds, so that the requeue tests don't wait two minutes.
AuthInfo=cred_expire=$CRED_EXPIRE_S
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
# A job whose begin time has come starts within seconds, not 30-60 s.
SchedulerParameters=sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
EnforcePartLimits=ALL
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$HOST
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
NodeName=$HOST CPUs=$(nproc) RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
  (umask 077; cat >"$DIR/slurmdbd.conf" <<EOF
$MARK: accounting, read by slurmdbd (SLURM_CONF=$DIR/slurm.conf)
AuthType=auth/munge
DbdHost=$HOST
SlurmUser=root
PidFile=$DIR/slurmdbd.pid
LogFile=$DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$(cat "$DIR/mysql.port")
StorageUser=slurm
StoragePass=$(cat "$DIR/dbpass")
StorageLoc=slurm_acct_db
EOF
  )
  if [[ -e $CONF && ! -L $CONF ]] && ! grep -q "^$MARK" "$CONF"; then
    die "$CONF exists and is not this script's; move it away first"
  fi
  ln -sfn "$DIR/slurm.conf" "$CONF"
  CHANGED=$([[ $old == "$(cat "$DIR/slurm.conf")" ]] || echo 1)
}

up() {
  [[ $EUID -eq 0 ]] || die "run as root"
  mkdir -p "$DIR"
  install_packages
  [[ -s $DIR/dbpass ]] || (umask 077; head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/dbpass")
  start_munge
  start_mariadb
  write_conf
  if ! alive "$DIR/slurmdbd.pid"; then
    SLURM_CONF=$DIR/slurm.conf slurmdbd  # it reads slurmdbd.conf beside SLURM_CONF
    wait_for 60 slurmdbd "$DIR/slurmdbd.log" listening 6819
  fi
  if [[ -n $CHANGED ]] && alive "$DIR/slurmctld.pid"; then  # some settings (cred_expire) are read at start only
    stop slurmctld "$DIR/slurmctld.pid"
  fi
  if alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid"; then
    scontrol reconfigure >/dev/null
  else
    alive "$DIR/slurmctld.pid" || slurmctld
    alive "$DIR/slurmd.pid" || slurmd
  fi
  local state=""
  for _ in $(seq 60); do
    state=$(node_state)
    [[ $state =~ ^(idle|mixed|allocated) ]] && break
    sleep 1
  done
  if [[ ! $state =~ ^(idle|mixed|allocated) ]]; then
    sinfo -R >&2 || true
    tail -n 20 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
    die "node $HOST is '${state:-not reported}', not idle, after 60 s"
  fi
  srun -t 1 -Q true || die "srun fails although node $HOST is $state"
  sacct -n -X -j 1 >/dev/null || die "sacct fails (log: $DIR/slurmdbd.log)"
  say "up: node $HOST $state, partition debug, config $CONF"
}

down() {
  if alive "$DIR/slurmctld.pid"; then
    squeue -h -o %i | xargs -r scancel || true
    for _ in $(seq 60); do [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break; sleep 1; done
    scontrol shutdown >/dev/null 2>&1 || true
  fi
  stop slurmctld "$DIR/slurmctld.pid"
  stop slurmd "$DIR/slurmd.pid"
  stop slurmdbd "$DIR/slurmdbd.pid"
  stop mariadbd "$DIR/mysql.pid"
  if [[ -e $DIR/munged.ours ]]; then
    stop munged /run/munge/munged.pid
    rm -f "$DIR/munged.ours"
  fi
  if [[ -L $CONF && $(readlink "$CONF") == "$DIR/slurm.conf" ]]; then rm -f "$CONF"; fi
  say "down"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) [[ -e $CONF ]] || die "down (no $CONF)"; sinfo; squeue ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
