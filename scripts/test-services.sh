#!/usr/bin/env bash
# Starts and stops throwaway servers for the test suite (CTest fixtures, see CMakeLists.txt).
#
#   test-services.sh start|stop|restart|down|up postgres|redis STATE_DIR
#
# start   postgres: runs a fresh PostgreSQL (15 on Debian 12) on a free 127.0.0.1 port, with
#         trust auth for the user `switchboard`, an empty database `switchboard_test`, and
#         durability off (the data is thrown away). Writes STATE_DIR/postgres.url
#         (postgresql://switchboard@127.0.0.1:PORT/switchboard_test), which tests read, and
#         STATE_DIR/postgres.dir (the server's temp dir).
#         redis: runs a fresh redis-server (7.0 on Debian 12) on a free 127.0.0.1 port, without
#         password or persistence. Writes STATE_DIR/redis.url (redis://127.0.0.1:PORT) and
#         STATE_DIR/redis.dir (its temp dir: pid file, log).
#         A leftover of an earlier, killed run recorded in STATE_DIR is stopped first.
# restart restarts that server on the same port (tests of "PostgreSQL restarted mid-run").
# down    stops that server and keeps its data (redis: none, it has no persistence); up starts
#         it again on the same port (an outage).
# freeze  (postgres) stops the server's processes with SIGSTOP (a server that hangs: its machine still
#         accepts connections and acknowledges what is sent, nothing answers); thaw resumes them.
# stop    stops it and removes its temp dir and the state files; does nothing when none runs.
#
# The server lives in /tmp/switchboard-pg.XXXXXX (/tmp/switchboard-redis.XXXXXX), not in
# STATE_DIR: the Unix socket path must stay short (about 100 bytes), and as root the server runs
# as the `postgres` user, which may not be able to enter the build tree. PostgreSQL refuses to
# run as root, so as root its programs run under `runuser -u postgres` (the Debian package
# creates that user); otherwise they run directly. redis-server runs as whoever calls.
#
# One short line per action goes to stderr. A service is a set of <service>_start/_stop/
# _restart/_down/_up functions below.
set -euo pipefail

me=test-services
say() { echo "$me: $*" >&2; }
die() { echo "$me: $*" >&2; exit 1; }
usage() { echo "usage: $0 start|stop|restart|down|up|freeze|thaw postgres|redis STATE_DIR" >&2; exit 2; }

[ $# -eq 3 ] || usage
action=$1 service=$2 state=$3
case "$action" in start|stop|restart|down|up|freeze|thaw) ;; *) usage ;; esac
case "$service" in postgres|redis) ;; *) usage ;; esac
case "$action:$service" in freeze:redis|thaw:redis) die "redis: $action is for postgres only" ;; esac
mkdir -p "$state"
state=$(cd "$state" && pwd)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f s", b - a }'; }

# Ports this machine has a TCP socket on (any state), from /proc/net/tcp{,6}, in decimal.
used_ports() {
  local hex
  # shellcheck disable=SC2013  # one hex port a line, no spaces
  for hex in $(awk 'FNR > 1 { n = split($2, a, ":"); print a[n] }' /proc/net/tcp /proc/net/tcp6 \
      2>/dev/null | sort -u); do
    echo $((16#$hex))
  done
}

# A free port from 20000-32767: below Linux's ephemeral range (32768-60999), so neither an
# outgoing connection nor a test server binding port 0 takes it from under the fixture later.
# Another process can still take it before the server binds it: the caller retries.
free_port() {
  local used port _
  used=$(used_ports)
  for _ in $(seq 100); do
    port=$((20000 + (RANDOM * 32768 + RANDOM) % 12768))
    grep -qx "$port" <<<"$used" || { echo "$port"; return; }
  done
  die "no free port found in 20000-32767"
}

# ---------------------------------------------------------------------------------------------
# postgres

# The server's programs (initdb, pg_ctl): `pg_config --bindir` when it holds them (the libpq-dev
# and server versions can differ), else the newest /usr/lib/postgresql/*/bin that does.
# $PG_BINDIR overrides both.
pg_bindir() {
  local d
  if [ -n "${PG_BINDIR:-}" ]; then
    [ -x "$PG_BINDIR/initdb" ] || die "PG_BINDIR=$PG_BINDIR has no initdb"
    echo "$PG_BINDIR"; return
  fi
  d=$(pg_config --bindir 2>/dev/null || true)
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return; fi
  for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return; fi
  done
  die "postgresql is not installed: run scripts/setup.sh"
}

# Environment a developer's shell may have set that would point the programs elsewhere.
unset PGDATA PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGSERVICE PGOPTIONS PGPASSWORD

# Runs a server program in the server's temp dir $pgdir (as `postgres` when root: from a
# directory it can enter, else initdb and pg_ctl warn about the working directory).
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    (cd "$pgdir" && runuser -u postgres -- "$@")
  else
    (cd "$pgdir" && "$@")
  fi
}

# The temp dir that STATE_DIR/SERVICE.dir records, if it has the shape start gives it
# (/tmp/switchboard-NAME.XXXXXX), so that a damaged state file never makes stop remove anything
# else.
recorded_dir() {
  local service=$1 name=$2 d
  [ -f "$state/$service.dir" ] || return 0
  d=$(cat "$state/$service.dir")
  case "$d" in
    /tmp/switchboard-"$name".??????) echo "$d" ;;
    *) say "ignoring $state/$service.dir: unexpected path '$d'" ;;
  esac
}

log_tail() { if [ -f "$1" ]; then tail -n 15 "$1" | sed 's/^/  | /' >&2; fi; }

postgres_stop() {
  local bin rc pid
  pgdir=$(recorded_dir postgres pg)
  if [ -z "$pgdir" ]; then
    rm -f "$state/postgres.dir" "$state/postgres.url"
    say "postgres: nothing to stop"
    return
  fi
  if [ -f "$pgdir/data/postmaster.pid" ]; then
    bin=$(pg_bindir)
    # A server left frozen (freeze without thaw) would not hear the stop.
    pid=$(head -n 1 "$pgdir/data/postmaster.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && grep -q postgres "/proc/$pid/cmdline" 2>/dev/null; then
      # shellcheck disable=SC2046  # one pid a line
      kill -CONT "$pid" $(ps -o pid= --ppid "$pid") 2>/dev/null || true
    fi
    rc=0; as_pg "$bin/pg_ctl" -D "$pgdir/data" status >/dev/null 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then
      if ! as_pg "$bin/pg_ctl" -D "$pgdir/data" -m immediate -w -t 30 stop >/dev/null 2>&1; then
        # pg_ctl could not stop it: kill the postmaster it recorded (the children follow it).
        pid=$(head -n 1 "$pgdir/data/postmaster.pid" 2>/dev/null || true)
        if [ -n "$pid" ] && grep -q postgres "/proc/$pid/cmdline" 2>/dev/null; then
          kill -KILL "$pid" 2>/dev/null || true
          sleep 0.5
        fi
        if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
          die "postgres: could not stop the server in $pgdir (pid $pid)"
        fi
      fi
    fi
  fi
  rm -rf "$pgdir"
  rm -f "$state/postgres.dir" "$state/postgres.url"
  say "postgres: stopped, removed $pgdir"
}

postgres_start() {
  local bin t0 port try started=""
  bin=$(pg_bindir)
  if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    die "postgres: running as root needs the 'postgres' user (the postgresql package creates it)"
  fi
  # A run that was killed (or never stopped) left one behind.
  if [ -f "$state/postgres.dir" ] || [ -f "$state/postgres.url" ]; then
    say "postgres: stopping the leftover of an earlier run"
    postgres_stop
  fi
  t0=$(now)
  pgdir=$(mktemp -d /tmp/switchboard-pg.XXXXXX)
  echo "$pgdir" >"$state/postgres.dir"   # recorded first, so a killed start is cleaned up too
  # On any failure from here: stop what runs and remove the temp dir and the state files.
  trap 'rc=$?; if [ $rc -ne 0 ]; then postgres_stop >/dev/null 2>&1 || true; fi' EXIT
  chmod 700 "$pgdir"
  [ "$(id -u)" -ne 0 ] || chown postgres:postgres "$pgdir"

  if ! as_pg "$bin/initdb" -D "$pgdir/data" -U switchboard --auth=trust --encoding=UTF8 \
      --locale=C.UTF-8 --no-sync >"$pgdir/initdb.log" 2>&1; then
    log_tail "$pgdir/initdb.log"
    die "postgres: initdb failed"
  fi

  for try in 1 2 3 4 5; do
    port=$(free_port)
    rm -f "$pgdir/server.log"   # created by pg_ctl, so the server's user owns it
    if as_pg "$bin/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -w -t 30 -o \
        "-c listen_addresses=127.0.0.1 -p $port -k $pgdir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
        start >/dev/null 2>&1; then
      started=1; break
    fi
    if grep -q "Address already in use" "$pgdir/server.log" 2>/dev/null; then
      say "postgres: port $port was taken, trying another"
      continue
    fi
    log_tail "$pgdir/server.log"
    die "postgres: the server did not start (log above, from $pgdir/server.log)"
  done
  [ -n "$started" ] || die "postgres: no free port after $try tries"

  if ! "$bin/psql" -X -q -v ON_ERROR_STOP=1 \
      "postgresql://switchboard@127.0.0.1:$port/postgres" \
      -c "CREATE DATABASE switchboard_test" >/dev/null; then
    die "postgres: could not create the database switchboard_test"
  fi
  echo "postgresql://switchboard@127.0.0.1:$port/switchboard_test" >"$state/postgres.url.tmp"
  mv "$state/postgres.url.tmp" "$state/postgres.url"
  trap - EXIT
  say "postgres: started $(cat "$state/postgres.url") in $(since "$t0") ($pgdir)"
}

postgres_restart() {
  local bin t0
  pgdir=$(recorded_dir postgres pg)
  if [ -z "$pgdir" ] || [ ! -f "$pgdir/data/PG_VERSION" ]; then
    die "postgres: nothing to restart (no server recorded in $state; run start first)"
  fi
  bin=$(pg_bindir)
  t0=$(now)
  # pg_ctl restart reuses the options of the last start (postmaster.opts): same port and socket.
  # -l again, or the new server would write to (and hold open) our stdout.
  if ! as_pg "$bin/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -m fast -w -t 30 \
      restart >/dev/null 2>&1; then
    log_tail "$pgdir/server.log"
    die "postgres: restart failed (log above, from $pgdir/server.log)"
  fi
  say "postgres: restarted in $(since "$t0")"
}

# The port of the recorded PostgreSQL (from its URL).
recorded_port() { sed -E 's|.*@127\.0\.0\.1:([0-9]+)/.*|\1|' "$state/postgres.url"; }

postgres_down() {
  local bin
  pgdir=$(recorded_dir postgres pg)
  [ -n "$pgdir" ] && [ -f "$pgdir/data/PG_VERSION" ] || die "postgres: nothing to take down"
  bin=$(pg_bindir)
  as_pg "$bin/pg_ctl" -D "$pgdir/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
    die "postgres: could not stop the server in $pgdir"
  say "postgres: down (data kept in $pgdir)"
}

postgres_up() {
  local bin port
  pgdir=$(recorded_dir postgres pg)
  [ -n "$pgdir" ] && [ -f "$state/postgres.url" ] || die "postgres: nothing to bring up"
  bin=$(pg_bindir)
  port=$(recorded_port)
  if ! as_pg "$bin/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -w -t 30 -o \
      "-c listen_addresses=127.0.0.1 -p $port -k $pgdir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
      start >/dev/null 2>&1; then
    log_tail "$pgdir/server.log"
    die "postgres: the server did not start again on port $port"
  fi
  say "postgres: up again on port $port"
}

# The postmaster of the recorded PostgreSQL and its children (the backends and helpers).
postgres_pids() {
  local pid
  pgdir=$(recorded_dir postgres pg)
  [ -n "$pgdir" ] && [ -f "$pgdir/data/postmaster.pid" ] || die "postgres: none runs"
  pid=$(head -n 1 "$pgdir/data/postmaster.pid")
  grep -q postgres "/proc/$pid/cmdline" 2>/dev/null || die "postgres: pid $pid is not the server"
  echo "$pid"
  ps -o pid= --ppid "$pid"
}

postgres_freeze() {
  # shellcheck disable=SC2046  # one pid a line
  kill -STOP $(postgres_pids) || die "postgres: could not freeze the server"
  say "postgres: frozen"
}

postgres_thaw() {
  # shellcheck disable=SC2046
  kill -CONT $(postgres_pids) || die "postgres: could not thaw the server"
  say "postgres: thawed"
}

# ---------------------------------------------------------------------------------------------
# redis

redis_bin() {
  if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    die "redis: redis-server is not installed: run scripts/setup.sh"
  fi
}


recorded_redis_port() { sed -E 's|^redis://127\.0\.0\.1:([0-9]+)$|\1|' "$state/redis.url"; }

# The pid of the server in $redisdir, when one runs (its pid file names a live redis-server).
redis_pid() {
  local pid
  pid=$(cat "$redisdir/redis.pid" 2>/dev/null || true)
  [ -n "$pid" ] && grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
  return 0
}

# Starts redis-server in $redisdir on port $1 and waits for its PONG. Returns 2 when the port
# was taken (the caller may try another), 1 on other failures.
redis_launch() {
  local port=$1 pid _
  rm -f "$redisdir/redis.pid" "$redisdir/redis.log"
  # With --daemonize the command returns before the server binds: the log and PING tell.
  redis-server --bind 127.0.0.1 --port "$port" --dir "$redisdir" --save "" --appendonly no \
    --daemonize yes --pidfile "$redisdir/redis.pid" --logfile "$redisdir/redis.log" \
    >/dev/null 2>&1 || return 1
  for _ in $(seq 200); do
    pid=$(redis_pid)
    # The PONG must come from ours, not from another server that took the port meanwhile.
    if [ -n "$pid" ] && [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] &&
        redis-cli -p "$port" info server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$pid"; then
      return 0
    fi
    if grep -q "Address already in use" "$redisdir/redis.log" 2>/dev/null; then return 2; fi
    if grep -q "# Failed\|Could not create\|FATAL" "$redisdir/redis.log" 2>/dev/null; then return 1; fi
    sleep 0.05
  done
  return 1
}

# Stops the server in $redisdir (TERM, then KILL after 10 s), if one runs.
redis_kill() {
  local pid _
  pid=$(redis_pid)
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  # Gone, or a zombie (empty cmdline): its sockets are closed. The daemon's parent is PID 1,
  # which may take a second or two to reap it.
  for _ in $(seq 200); do
    grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null || return 0
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.2
  if grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null; then
    die "redis: could not stop the server in $redisdir (pid $pid)"
  fi
}

redis_stop() {
  redisdir=$(recorded_dir redis redis)
  if [ -z "$redisdir" ]; then
    rm -f "$state/redis.dir" "$state/redis.url"
    say "redis: nothing to stop"
    return
  fi
  redis_kill
  rm -rf "$redisdir"
  rm -f "$state/redis.dir" "$state/redis.url"
  say "redis: stopped, removed $redisdir"
}

redis_start() {
  local t0 port try rc started=""
  redis_bin
  if [ -f "$state/redis.dir" ] || [ -f "$state/redis.url" ]; then
    say "redis: stopping the leftover of an earlier run"
    redis_stop
  fi
  t0=$(now)
  redisdir=$(mktemp -d /tmp/switchboard-redis.XXXXXX)
  echo "$redisdir" >"$state/redis.dir"   # recorded first, so a killed start is cleaned up too
  trap 'rc=$?; if [ $rc -ne 0 ]; then redis_stop >/dev/null 2>&1 || true; fi' EXIT
  for try in 1 2 3 4 5; do
    port=$(free_port)
    rc=0; redis_launch "$port" || rc=$?
    if [ "$rc" -eq 0 ]; then started=1; break; fi
    redis_kill
    if [ "$rc" -eq 2 ]; then say "redis: port $port was taken, trying another"; continue; fi
    log_tail "$redisdir/redis.log"
    die "redis: the server did not start (log above, from $redisdir/redis.log)"
  done
  [ -n "$started" ] || die "redis: no free port after $try tries"
  echo "redis://127.0.0.1:$port" >"$state/redis.url.tmp"
  mv "$state/redis.url.tmp" "$state/redis.url"
  trap - EXIT
  say "redis: started $(cat "$state/redis.url") in $(since "$t0") ($redisdir)"
}

redis_down() {
  redisdir=$(recorded_dir redis redis)
  if [ -z "$redisdir" ] || [ -z "$(redis_pid)" ]; then die "redis: nothing to take down"; fi
  redis_kill
  say "redis: down (port kept: $(recorded_redis_port))"
}

redis_up() {
  local port rc=0
  redisdir=$(recorded_dir redis redis)
  if [ -z "$redisdir" ] || [ ! -f "$state/redis.url" ]; then die "redis: nothing to bring up"; fi
  [ -z "$(redis_pid)" ] || die "redis: already up"
  port=$(recorded_redis_port)
  redis_launch "$port" || rc=$?
  if [ "$rc" -ne 0 ]; then
    redis_kill
    log_tail "$redisdir/redis.log"
    die "redis: the server did not start again on port $port"
  fi
  say "redis: up again on port $port"
}

redis_restart() {
  redis_down
  redis_up
}

"${service}_${action}"
