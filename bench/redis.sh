#!/usr/bin/env bash
# bench/redis.sh -- a server workload end to end: redis-server 7.0 (Debian source, gcc -O2,
# linked with --emit-relocs, by scripts/build-real-programs.sh) optimized by one `rivet auto`
# command from a redis-benchmark training load, then the original and the optimized server
# measured side by side under the same fixed, bounded load.
#
#   rivet auto redis-server -o redis-server.fast --server '{} --port P ...' \
#       --ready 'redis-cli -p P ping' --load 'redis-benchmark -p P -n 200000 -P 16 ...'
#
# Measurement. Each round starts each server once (order alternating per round) on
# 127.0.0.1, runs the same redis-benchmark load against it (LOAD_REQUESTS requests per test,
# 16 pipelined, one connection so the load is the same sequence every time), and shuts it
# down with SHUTDOWN NOSAVE. The server runs under `perf stat -e task-clock` pinned to CPU 0,
# the client pinned to CPU 1, so the figure is the CPU time the server itself spent serving
# the load, the quantity a faster binary lowers (throughput here mostly measures the client,
# which shares this 2-core VM). Reported: per server the median CPU time and median client
# wall time; the median over rounds of the per-round ratio optimized / original, with a
# distribution-free 95% interval (sign test on order statistics), and how many rounds the
# optimized server was faster. Also cachegrind (fixed geometry) I1 misses and instructions of
# one server run under a smaller load. No thresholds.
#
# Usage: bench/redis.sh [ROUNDS] > docs/redis-benchmark.md     (ROUNDS defaults to 20)
# Needs: linux-perf (perf stat, software events only), valgrind, util-linux (taskset).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-20}"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "usage: bench/redis.sh [ROUNDS]" >&2; exit 2; }
log() { printf 'bench/redis: %s\n' "$*" >&2; }
die() { printf 'bench/redis: error: %s\n' "$*" >&2; exit 1; }
command -v perf >/dev/null || die "perf missing (apt-get install linux-perf)"
command -v valgrind >/dev/null || die "valgrind missing (apt-get install valgrind)"
command -v taskset >/dev/null || die "taskset missing (apt-get install util-linux)"
if [[ -z ${RIVET:-} ]]; then
    cargo build --release -q -p rivet
    RIVET="$PWD/target/release/rivet"
fi
declare -A REAL
while read -r name path; do REAL[$name]=$path; done < <(scripts/build-real-programs.sh 2>/dev/null)
SERVER="${REAL[redis-gcc]:-}"
CLIENT="${REAL[redis-benchmark]:-}"
CLI="${REAL[redis-cli]:-}"
[[ -x $SERVER && -x $CLIENT && -x $CLI ]] || die "scripts/build-real-programs.sh did not build redis"
WORK="$(mktemp -d)"
PORT=$((20000 + RANDOM % 20000))
cleanup() {
    "$CLI" -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
    rm -rf -- "$WORK"
}
trap cleanup EXIT
TESTS=set,get,incr,lpush,lpop,sadd,hset,lrange_100
LOAD_REQUESTS="${LOAD_REQUESTS:-100000}"
SERVER_ARGS=(--port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --protected-mode yes)

log "training and optimizing with rivet auto"
"$RIVET" auto "$SERVER" -o "$WORK/redis-server.fast" \
    --server "{} --port $PORT --bind 127.0.0.1 --save '' --appendonly no" \
    --ready "$CLI -p $PORT ping" \
    --load "$CLIENT -p $PORT -n 200000 -P 16 -q -t set,get,incr,lpush,lpop" \
    >"$WORK/auto.txt" 2>&1 || { cat "$WORK/auto.txt" >&2; die "rivet auto failed"; }
declare -A BIN=([original]="$SERVER" [rivet]="$WORK/redis-server.fast")

# run_once NAME: one server run under the load; prints "cpu_ms client_wall_s".
run_once() {
    local stat="$WORK/stat.$1" out="$WORK/client.$1"
    rm -f "$stat"
    taskset -c 0 perf stat -x, -e task-clock -o "$stat" -- "${BIN[$1]}" "${SERVER_ARGS[@]}" \
        >"$WORK/server.$1.log" 2>&1 &
    local perf_pid=$! tries=0
    until "$CLI" -p "$PORT" ping >/dev/null 2>&1; do
        tries=$((tries + 1))
        ((tries < 100)) || die "the $1 server did not answer PING"
        sleep 0.05
    done
    local t0 t1
    t0=$(date +%s.%N)
    taskset -c 1 timeout 300 "$CLIENT" -p "$PORT" -c 1 -n "$LOAD_REQUESTS" -P 16 -q -t "$TESTS" \
        >"$out" 2>&1 || die "redis-benchmark failed against the $1 server"
    t1=$(date +%s.%N)
    "$CLI" -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
    timeout 30 tail --pid="$perf_pid" -f /dev/null || die "the $1 server did not stop"
    wait "$perf_pid" || true
    local cpu
    cpu=$(awk -F, '/task-clock/ { print $1 }' "$stat")
    [[ -n $cpu ]] || die "no task-clock for the $1 server"
    echo "$cpu $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# interval: sorted ratios on stdin -> "low high" of a 95% distribution-free interval for
# their median (order statistics k and n-k+1, k the largest with P(Bin(n,1/2) < k) <= 0.025).
interval() {
    sort -g | awk '{ v[NR] = $1 } END {
        n = NR; k = 0; cdf = 0; p = 0.5 ^ n; term = p
        for (i = 0; i <= n; i++) { if (cdf + term > 0.025) break; cdf += term; k = i + 1; term = term * (n - i) / (i + 1) }
        if (k < 1) { print "n/a n/a"; exit }
        printf "%.3f %.3f\n", v[k], v[n - k + 1] }'
}

log "checking both servers answer the same"
for name in original rivet; do
    taskset -c 0 "${BIN[$name]}" "${SERVER_ARGS[@]}" >/dev/null 2>&1 &
    pid=$!
    until "$CLI" -p "$PORT" ping >/dev/null 2>&1; do sleep 0.05; done
    {
        "$CLI" -p "$PORT" set k v
        "$CLI" -p "$PORT" get k
        "$CLI" -p "$PORT" incrby n 41
        "$CLI" -p "$PORT" rpush l a b c
        "$CLI" -p "$PORT" lrange l 0 -1
        "$CLI" -p "$PORT" hset h f 1
        "$CLI" -p "$PORT" hgetall h
    } >"$WORK/answers.$name"
    "$CLI" -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" || true
done
cmp -s "$WORK/answers.original" "$WORK/answers.rivet" || die "the optimized server answered differently"

log "$ROUNDS rounds"
: >"$WORK/rounds"
for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then order=(original rivet); else order=(rivet original); fi
    declare -A RES=()
    for name in "${order[@]}"; do RES[$name]=$(run_once "$name"); done
    read -r oc ow <<<"${RES[original]}"
    read -r rc rw <<<"${RES[rivet]}"
    [[ -n ${ow:-} && -n ${rw:-} ]] || die "round $r failed"
    echo "$oc $ow $rc $rw" >>"$WORK/rounds"
    log "round $r: server CPU original ${oc} ms, rivet ${rc} ms"
done

log "cachegrind (one run each, smaller load)"
cg() {
    taskset -c 0 valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes \
        --I1=32768,8,64 --D1=32768,8,64 --LL=1048576,16,64 --cachegrind-out-file=/dev/null \
        "${BIN[$1]}" "${SERVER_ARGS[@]}" >"$WORK/cg.$1" 2>&1 &
    local pid=$!
    until "$CLI" -p "$PORT" ping >/dev/null 2>&1; do sleep 0.2; done
    taskset -c 1 timeout 600 "$CLIENT" -p "$PORT" -c 1 -n 20000 -P 16 -q -t "$TESTS" >/dev/null 2>&1
    "$CLI" -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" || true
    awk '/I +refs:/ { gsub(",", "", $4); i = $4 } /I1 +misses:/ { gsub(",", "", $4); m = $4 }
         /Mispredicts:/ { gsub(",", "", $3); b = $3 } END { print i, m, b }' "$WORK/cg.$1"
}
read -r o_ins o_i1 o_mp <<<"$(cg original)"
read -r r_ins r_i1 r_mp <<<"$(cg rivet)"

ratio_cpu=$(awk '{ printf "%.4f\n", $3 / $1 }' "$WORK/rounds")
ratio_wall=$(awk '{ printf "%.4f\n", $4 / $2 }' "$WORK/rounds")
faster=$(awk '$3 < $1 { n++ } END { print n + 0 }' "$WORK/rounds")
fmt() { sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' <<<"$1"; }

echo "# A server: redis-server optimized by \`rivet auto\`"
echo
echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo),"
echo "$(. /etc/os-release && echo "$PRETTY_NAME"); rivet $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
echo "Reproduce: \`bench/redis.sh $ROUNDS > docs/redis-benchmark.md\`."
echo
echo "redis-server 7.0 from the Debian source (gcc -O2 -g, -Wl,--emit-relocs, libc malloc), optimized"
echo "in one command:"
echo
echo '```'
echo "rivet auto redis-server -o redis-server.fast --server '{} --port P --bind 127.0.0.1 --save \"\" --appendonly no' \\"
echo "    --ready 'redis-cli -p P ping' --load 'redis-benchmark -p P -n 200000 -P 16 -q -t set,get,incr,lpush,lpop'"
echo '```'
echo
echo '```'
sed -n '1,12p' "$WORK/auto.txt"
echo '```'
echo
echo "Load per run: \`redis-benchmark -c 1 -n $LOAD_REQUESTS -P 16 -t $TESTS\` on 127.0.0.1"
echo "(three of the eight tests were not in the training load). Server pinned to CPU 0 under"
echo "\`perf stat -e task-clock\`, client pinned to CPU 1; $ROUNDS rounds, order alternating."
echo "Both servers gave the same answers to a scripted session."
echo
echo "| | original | optimized |"
echo "|---|---:|---:|"
echo "| server CPU time (median) | $(awk '{ print $1 }' "$WORK/rounds" | median | awk '{ printf "%.0f ms", $1 }') | $(awk '{ print $3 }' "$WORK/rounds" | median | awk '{ printf "%.0f ms", $1 }') |"
echo "| client wall time (median) | $(awk '{ print $2 }' "$WORK/rounds" | median | awk '{ printf "%.2f s", $1 }') | $(awk '{ print $4 }' "$WORK/rounds" | median | awk '{ printf "%.2f s", $1 }') |"
echo "| cachegrind: instructions (20,000 requests per test) | $(fmt "$o_ins") | $(fmt "$r_ins") |"
echo "| cachegrind: I1 misses | $(fmt "$o_i1") | $(fmt "$r_i1") |"
echo "| cachegrind: branch mispredicts | $(fmt "$o_mp") | $(fmt "$r_mp") |"
echo
read -r lo hi <<<"$(interval <<<"$ratio_cpu")"
read -r wlo whi <<<"$(interval <<<"$ratio_wall")"
echo "Per-round ratio optimized / original (median, 95% interval):"
echo
echo "- server CPU time: **$(median <<<"$ratio_cpu" | awk '{ printf "%.3f", $1 }')** ($lo..$hi); the optimized server used less CPU in $faster of $ROUNDS rounds"
echo "- client wall time: $(median <<<"$ratio_wall" | awk '{ printf "%.3f", $1 }') ($wlo..$whi)"
echo
echo "<details><summary>Every round (server CPU ms, client s: original, optimized)</summary>"
echo
echo '```'
cat "$WORK/rounds"
echo '```'
echo
echo "</details>"
