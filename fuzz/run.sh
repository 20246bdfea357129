#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), one after another, each from its
# seeds (fuzz/seeds/TARGET) and the corpus earlier runs grew (fuzz/corpus/TARGET, not
# committed). Prints each target's executions and what it found. An input that fails is
# copied to fuzz/regressions/TARGET/, which the normal test suite runs (engine/tests/
# fuzz_inputs.rs, server/tests/fuzz_inputs.rs): fix it, keep it. Needs nightly and
# cargo-fuzz (`cargo install cargo-fuzz`). `fuzz/run.sh 600 segment` runs one target.
set -uo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(records checkpoint manifest json_body segment request_head)
fi
# Largest input per target: a segment's written part is up to 128 KiB in the seeds.
max_len() {
    case "$1" in
        segment|records) echo 262144 ;;
        *) echo 16384 ;;
    esac
}
mkdir -p logs
status=0
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" "artifacts/$target"
    log="logs/$target.log"
    cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -max_len="$(max_len "$target")" -print_final_stats=1 \
        -timeout=10 -rss_limit_mb=4096 > "$log" 2>&1
    code=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    found=$(find "artifacts/$target" -type f | wc -l)
    if [ "$found" -gt 0 ]; then
        mkdir -p "regressions/$target"
        cp artifacts/"$target"/* "regressions/$target/"
        status=1
    fi
    echo "$target: ${runs:-?} executions in ${seconds}s, exit $code, $found failing inputs (log: fuzz/$log)"
done
exit "$status"
