#!/usr/bin/env bash
# What the incident history costs a running mesh (Linux only): a 4-node
# mesh of real `meshd run` processes on loopback (configs from `meshctl plan
# --write`, cables on 127.x addresses), with the history on or off, steady
# or in chaos, measured from /proc.
#
#   bench/history-cost.sh BIN_DIR on|off steady|chaos DURATION_S [WARMUP_S]
#
# BIN_DIR holds meshd and meshctl (target/release). chaos: every 8 s one
# node (the last) is frozen (SIGSTOP) for 4 s, past the 3-s stale_after,
# and thawed, so its peers call it suspect and up again, its links unknown
# and back, and page nothing (no Alertmanager): a flapping node, an
# incident every 8 s on each peer. Prints one line per node and a total:
#
#   node=h1 cpu=0.812% write_bytes=40960 syscw=1234 history_bytes=77824
#
# cpu is utime+stime over the window as a percentage of one core;
# write_bytes is what the process sent to storage (/proc/PID/io: the
# history's commits, and nothing else meshd writes with its log on
# /dev/null); syscw counts its write syscalls; history_bytes is the
# history file's size at the end.
set -euo pipefail

if [[ $# -lt 4 || $# -gt 5 ]]; then
    echo "usage: $0 BIN_DIR on|off steady|chaos DURATION_S [WARMUP_S]" >&2
    exit 2
fi
bin=$1 history=$2 mode=$3 duration=$4 warmup=${5:-20}
nodes=(h1 h2 h3 h4)
hz=$(getconf CLK_TCK)
dir=$(mktemp -d)
pids=()
stop() {
    for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap stop EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
args=()
for node in "${nodes[@]}"; do
    args+=(--management "$node=127.0.0.1:$(port)" --grpc "$node=127.0.0.1:$(port)" --metrics "$node=127.0.0.1:$(port)")
done
slot=$((RANDOM % 250))
"$bin/meshctl" plan --names "$(IFS=,; echo "${nodes[*]}")" --model m4-max-studio \
    --link-range "127.77.$slot.0/24" --write "$dir/plan" --certs "${args[@]}" >/dev/null
for node in "${nodes[@]}"; do
    config="$dir/plan/$node/meshd.toml"
    if [[ $history == on ]]; then
        printf '\n[history]\npath = "%s"\n' "$dir/plan/$node/history.redb" >>"$config"
    else
        printf '\n[history]\nenabled = false\n' >>"$config"
    fi
    "$bin/meshd" run --config "$config" --log-level warn >/dev/null 2>&1 &
    pids+=($!)
done

ticks() {
    local stat rest
    stat=$(<"/proc/$1/stat")
    rest=${stat##*) }
    read -r -a f <<<"$rest"
    echo $((f[11] + f[12]))
}
io() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/io"; }

sleep "$warmup"
declare -A c0 w0 s0
for pid in "${pids[@]}"; do c0[$pid]=$(ticks "$pid") w0[$pid]=$(io "$pid" write_bytes) s0[$pid]=$(io "$pid" syscw); done
t0=$(date +%s%N)
if [[ $mode == chaos ]]; then
    frozen=${pids[3]}
    end=$((SECONDS + duration))
    while ((SECONDS < end)); do
        kill -STOP "$frozen"; sleep 4; kill -CONT "$frozen"; sleep 4
    done
else
    sleep "$duration"
fi
t1=$(date +%s%N)
total_ticks=0 total_writes=0 total_syscw=0
for i in "${!nodes[@]}"; do
    pid=${pids[$i]} node=${nodes[$i]}
    kill -0 "$pid" || { echo "$node exited" >&2; exit 1; }
    dc=$(($(ticks "$pid") - c0[$pid])) dw=$(($(io "$pid" write_bytes) - w0[$pid])) ds=$(($(io "$pid" syscw) - s0[$pid]))
    size=$(stat -c %s "$dir/plan/$node/history.redb" 2>/dev/null || echo 0)
    total_ticks=$((total_ticks + dc)) total_writes=$((total_writes + dw)) total_syscw=$((total_syscw + ds))
    awk -v n="$node" -v dc="$dc" -v hz="$hz" -v dt=$((t1 - t0)) -v dw="$dw" -v ds="$ds" -v size="$size" \
        'BEGIN { printf "node=%s cpu=%.3f%% write_bytes=%d syscw=%d history_bytes=%d\n", n, 100 * dc / hz / (dt / 1e9), dw, ds, size }'
done
awk -v dc="$total_ticks" -v hz="$hz" -v dt=$((t1 - t0)) -v dw="$total_writes" -v ds="$total_syscw" -v h="$history" -v m="$mode" \
    'BEGIN { printf "total history=%s mode=%s wall=%.1fs cpu=%.3f%% (4 nodes) write_bytes=%d syscw=%d\n", h, m, dt / 1e9, 100 * dc / hz / (dt / 1e9), dw, ds }'
