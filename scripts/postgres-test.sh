#!/usr/bin/env bash
# postgres-test.sh makes a throwaway PostgreSQL server available for the store
# package's tests and prints its DSN on standard output (everything else goes to
# standard error), so a caller can write
#
#   export AGENTOS_GATEWAY_TEST_POSTGRES="$(scripts/postgres-test.sh start)"
#   ...
#   scripts/postgres-test.sh stop
#
# Usage:
#   postgres-test.sh start [DIR]   start a server whose cluster lives in DIR (initdb'd on
#                                  first use) and print its DSN; if one already runs
#                                  there, just print its DSN
#   postgres-test.sh dsn [DIR]     print the DSN of the server running in DIR
#   postgres-test.sh stop [DIR]    stop the server in DIR and delete DIR
#
# DIR defaults to $AGENTOS_GATEWAY_PG_DIR, else ${TMPDIR:-/tmp}/agentos-gateway-pg-<uid>.
# It is outside the work tree on purpose: the server runs as the postgres user,
# which must be able to reach it, and every parent of /tmp is world-searchable.
#
# The server listens on a free port of 127.0.0.1 only, with its unix socket in
# DIR, a random password for TCP clients, and durability turned off (fsync,
# synchronous_commit): it is for tests and nothing else. If PostgreSQL is not
# installed, the Debian packages are (which needs root, as the CI machine is).
set -euo pipefail
umask 077

DB_NAME=agentos_gateway_test
DB_USER=postgres

log() { echo "postgres-test: $*" >&2; }
die() {
	log "$*"
	exit 1
}

default_dir() {
	echo "${AGENTOS_GATEWAY_PG_DIR:-${TMPDIR:-/tmp}/agentos-gateway-pg-$(id -u)}"
}

# find_bindir prints the directory of the newest installed PostgreSQL server
# binaries, or nothing.
find_bindir() {
	if [[ -n "${PG_BINDIR:-}" && -x "$PG_BINDIR/initdb" ]]; then
		echo "$PG_BINDIR"
		return
	fi
	local d
	d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
	if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
		echo "$d"
		return
	fi
	if command -v initdb >/dev/null 2>&1; then
		dirname "$(readlink -f "$(command -v initdb)")"
	fi
}

ensure_installed() {
	BINDIR="$(find_bindir)"
	if [[ -n "$BINDIR" ]]; then
		return
	fi
	[[ "$(id -u)" == 0 ]] || die "PostgreSQL is not installed and we are not root to install it: apt-get install postgresql"
	log "installing PostgreSQL (apt-get install postgresql)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq postgresql >&2
	BINDIR="$(find_bindir)"
	[[ -n "$BINDIR" ]] || die "PostgreSQL was installed but initdb was not found under /usr/lib/postgresql/*/bin"
}

# as_pg runs a command as the user that owns the cluster: postgres when we are
# root (the server refuses to run as root), ourselves otherwise.
as_pg() {
	if [[ "$(id -u)" == 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

ensure_user() {
	[[ "$(id -u)" == 0 ]] || return 0
	if ! id postgres >/dev/null 2>&1; then
		log "creating the postgres system user"
		useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
	fi
}

running() { # DIR
	[[ -f "$1/data/PG_VERSION" ]] && as_pg "$BINDIR/pg_ctl" -D "$1/data" status >/dev/null 2>&1
}

print_dsn() { # DIR
	local port password
	port="$(cat "$1/port")"
	password="$(cat "$1/password")"
	echo "postgres://${DB_USER}:${password}@127.0.0.1:${port}/${DB_NAME}?sslmode=disable"
}

port_in_use() { # PORT
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

cmd_start() { # DIR
	local dir="$1"
	ensure_installed
	ensure_user
	if running "$dir"; then
		log "already running in $dir"
		print_dsn "$dir"
		return
	fi

	mkdir -p "$dir"
	chmod 700 "$dir"
	if [[ "$(id -u)" == 0 ]]; then
		chown postgres: "$dir"
	fi
	if [[ ! -f "$dir/data/PG_VERSION" ]]; then
		rm -rf "$dir/data"
		as_pg bash -c 'od -An -tx1 -N16 /dev/urandom | tr -d " \n" >"$1/password"' _ "$dir"
		log "initdb $dir/data ($BINDIR)"
		as_pg "$BINDIR/initdb" -D "$dir/data" -U "$DB_USER" --pwfile="$dir/password" \
			--auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
			{
				cat "$dir/initdb.log" >&2
				die "initdb failed"
			}
	fi

	# Pick a random free port; retry if someone takes it between the check and
	# the start.
	local attempt port started=""
	for attempt in 1 2 3 4 5 6 7 8; do
		port=$((20000 + RANDOM % 40000))
		if port_in_use "$port"; then
			continue
		fi
		if as_pg "$BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -s \
			-o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
			start >&2; then
			started=1
			break
		fi
		log "start on port $port failed (attempt $attempt)"
	done
	if [[ -z "$started" ]]; then
		tail -n 30 "$dir/server.log" >&2 || true
		die "could not start PostgreSQL in $dir"
	fi
	as_pg bash -c 'echo "$2" >"$1/port"' _ "$dir" "$port"

	if [[ "$(as_pg "$BINDIR/psql" -h "$dir" -p "$port" -U "$DB_USER" -d postgres -XtAc "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]]; then
		as_pg "$BINDIR/createdb" -h "$dir" -p "$port" -U "$DB_USER" "$DB_NAME"
	fi
	log "running in $dir on 127.0.0.1:$port"
	print_dsn "$dir"
}

cmd_dsn() { # DIR
	BINDIR="$(find_bindir)"
	[[ -n "$BINDIR" ]] || die "PostgreSQL is not installed"
	running "$1" || die "no server is running in $1"
	print_dsn "$1"
}

cmd_stop() { # DIR
	local dir="$1"
	[[ -d "$dir" ]] || {
		log "nothing to stop in $dir"
		return
	}
	BINDIR="$(find_bindir)"
	if [[ -n "$BINDIR" ]] && running "$dir"; then
		as_pg "$BINDIR/pg_ctl" -D "$dir/data" -m fast -w -t 60 -s stop >&2
	fi
	# Refuse to delete anything that does not look like a cluster of ours.
	if [[ -f "$dir/data/PG_VERSION" || -z "$(ls -A "$dir")" ]]; then
		rm -rf "$dir"
		log "stopped and removed $dir"
	else
		log "stopped; $dir does not look like a test cluster, left in place"
	fi
}

main() {
	local cmd="${1:-start}"
	local dir="${2:-$(default_dir)}"
	case "$dir" in
	/*) ;;
	*) dir="$PWD/$dir" ;;
	esac
	case "$cmd" in
	start) cmd_start "$dir" ;;
	dsn) cmd_dsn "$dir" ;;
	stop) cmd_stop "$dir" ;;
	-h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
	*) die "unknown command $cmd (start|dsn|stop)" ;;
	esac
}

main "$@"
