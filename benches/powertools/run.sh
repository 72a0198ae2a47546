#!/usr/bin/env bash
# Measures AWS Powertools for Python's idempotency utility (Redis persistence layer) on
# W1 and W2 against a redis-server of its own on loopback. See README.md beside this file.
#
#   bash benches/powertools/run.sh [--n 20000] [--runs 3]
#
# Makes the venv ~/.cache/idem/powertools-venv with pinned packages if it is missing
# (IDEM_POWERTOOLS_VENV overrides the place), starts redis-server on a free loopback port
# with no persistence, runs bench.py and stops the server, on failure too.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${IDEM_POWERTOOLS_VENV:-$HOME/.cache/idem/powertools-venv}"
# Pinned: the utility, the Redis client its Redis layer uses, boto3 (the idempotency
# package imports its DynamoDB layer, and so boto3, whichever layer is used), and the
# dependencies of all three.
pins=(
    "aws-lambda-powertools==3.37.0"
    "redis==8.2.0"
    "boto3==1.44.18"
    "botocore==1.44.18"
    "s3transfer==0.19.3"
    "jmespath==1.1.0"
    "python-dateutil==2.9.0.post0"
    "six==1.17.0"
    "urllib3==2.8.0"
    "typing_extensions==4.16.0"
)

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "run.sh: need root to run: $*" >&2; return 1; fi
}

if ! command -v redis-server >/dev/null; then
    echo "run.sh: installing redis-server" >&2
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server
    # The package starts a system service on port 6379; this script does not use it.
fi

stamp="$venv/.idem-pins"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ]; then
    echo "run.sh: making $venv" >&2
    mkdir -p "$(dirname "$venv")"
    if ! python3 -m venv --clear "$venv"; then
        # Debian's python3 ships venv's ensurepip in a package of its own.
        as_root apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv
        python3 -m venv --clear "$venv"
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}"
    echo "${pins[*]}" >"$stamp"
fi
py="$venv/bin/python"

dir="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free loopback port: let the kernel pick one, then start the server on it; try again
# if another process took it in between.
for attempt in 1 2 3 4 5; do
    port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize no --loglevel warning --dir "$dir" >"$dir/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 50); do
        if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then break 2; fi
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    echo "run.sh: redis-server did not start on port $port (attempt $attempt):" >&2
    cat "$dir/server.log" >&2
done
if [ -z "$server_pid" ]; then
    echo "run.sh: could not start redis-server" >&2
    exit 1
fi

cmd="bash benches/powertools/run.sh"
[ $# -gt 0 ] && cmd="$cmd $*"
"$py" "$here/bench.py" --port "$port" --command "$cmd" "$@"
