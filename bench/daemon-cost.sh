#!/usr/bin/env bash
# CPU and memory of a running `meshd run`, measured from /proc (Linux only).
#
#   bench/daemon-cost.sh BINARY CONFIG DURATION_S [WARMUP_S]
#
# Starts `BINARY run --config CONFIG`, waits WARMUP_S seconds (default 10),
# then reads utime+stime from /proc/PID/stat at the start and end of a
# DURATION_S-second window and prints one line:
#
#   cpu=0.123% rss=9.8MB hwm=10.1MB wall=60.0s ticks=7
#
# cpu is the percentage of one core over the window's wall time (clock ticks
# from `getconf CLK_TCK`), rss and hwm are VmRSS and VmHWM at the end (MB =
# 10^6 bytes). The daemon's log goes to $MESHD_LOG (default /dev/null). The
# daemon is stopped (SIGTERM, then SIGKILL after 5 s) however the script ends.
set -euo pipefail

if [[ $# -lt 3 || $# -gt 4 ]]; then
    echo "usage: $0 BINARY CONFIG DURATION_S [WARMUP_S]" >&2
    exit 2
fi
binary=$1 config=$2 duration=$3 warmup=${4:-10}
log=${MESHD_LOG:-/dev/null}
hz=$(getconf CLK_TCK)

"$binary" check-config "$config" >/dev/null

"$binary" run --config "$config" --log-level warn >"$log" 2>&1 &
pid=$!
stop() {
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
trap stop EXIT

# utime + stime (fields 14 and 15); the command name (field 2) may hold
# spaces, so split after its closing parenthesis.
ticks() {
    local stat rest
    stat=$(<"/proc/$pid/stat")
    rest=${stat##*) }
    read -r -a f <<<"$rest"
    # rest starts at field 3, so field N is f[N-3].
    echo $((f[11] + f[12]))
}
now_ns() { date +%s%N; }
kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$pid/status"; }

sleep "$warmup"
kill -0 "$pid" 2>/dev/null || { echo "meshd exited during warm-up (log: $log)" >&2; exit 1; }
t0=$(now_ns) c0=$(ticks)
sleep "$duration"
kill -0 "$pid" 2>/dev/null || { echo "meshd exited during the run (log: $log)" >&2; exit 1; }
t1=$(now_ns) c1=$(ticks)
rss=$(kb VmRSS) hwm=$(kb VmHWM)

awk -v dc=$((c1 - c0)) -v hz="$hz" -v dt=$((t1 - t0)) -v rss="$rss" -v hwm="$hwm" 'BEGIN {
    wall = dt / 1e9
    printf "cpu=%.3f%% rss=%.1fMB hwm=%.1fMB wall=%.1fs ticks=%d\n",
        100 * dc / hz / wall, rss * 1024 / 1e6, hwm * 1024 / 1e6, wall, dc
}'
