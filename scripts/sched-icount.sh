#!/usr/bin/env bash
# Instructions per step of the scheduler bench's drivers, under callgrind (issue 17): each pair
# runs 1+A and 1+B times; (count(B) - count(A)) / (B - A) / steps is one step's cost, with the
# set-up (runtime, plan, validation, warm-up) cancelled out. Counts every thread.
#
#   scripts/sched-icount.sh [graph ...]     (default: all four graphs)
#   DRIVERS='nuvira' scripts/sched-icount.sh layered   (default: baseline nuvira nuvira-no-history)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
cargo bench --no-default-features --bench scheduler_icount --no-run 2>/dev/null
bin=$(ls -t target/release/deps/scheduler_icount-* | grep -v '\.d$' | head -1)
A=${A:-1}
B=${B:-4}
STEPS=${STEPS:-10000}
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$@" 2>&1 |
        sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
graphs=("$@")
[ ${#graphs[@]} -eq 0 ] && graphs=(layered chain independent chain-yield)
printf '%-12s %-18s %s\n' graph driver instructions/step
read -r -a drivers <<<"${DRIVERS:-baseline nuvira nuvira-no-history}"
for g in "${graphs[@]}"; do
    for d in "${drivers[@]}"; do
        a=$(count "$g" "$d" "$A")
        b=$(count "$g" "$d" "$B")
        printf '%-12s %-18s %d\n' "$g" "$d" $(( (b - a) / (B - A) / STEPS ))
    done
done
