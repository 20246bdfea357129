#!/usr/bin/env bash
# Every test of the workspace (cargo test --workspace: unit, property, crash simulation,
# black-box, the conformance suite and the public clients), then the totals in one line:
# `N passed, M failed, K skipped`, over every test binary and every conformance run, after
# the name of each skipped test and why. Arguments go to cargo test in place of
# `--workspace` (`./test.sh -p ds-engine --test crash_sim`). The output is kept in
# target/test-output.log; the exit code is cargo's.
set -uo pipefail
cd "$(dirname "$0")"
mkdir -p target
log=target/test-output.log
started=$SECONDS
if [ $# -eq 0 ]; then
    set -- --workspace
fi
cargo test --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
minutes=$(( (SECONDS - started + 30) / 60 ))

# What the log says, in four kinds of lines:
#   test result: ok. 12 passed; 0 failed; 1 ignored; ...       (each test binary)
#   test NAME ... ignored, REASON                               (a test marked #[ignore])
#   SKIPPED NAME: WHY                                           (a test that skipped itself)
#   CONFORMANCE RUN: N passed, M failed, K skipped              (each conformance run)
#   SKIPPED conformance RUN: NAME: WHY                          (a test the suite skipped)
# A test binary that died without its result line is a failure.
sed 's/\x1b\[[0-9;]*m//g' "$log" | awk -v status="$status" -v minutes="$minutes" '
  /^test result: / {
    binaries++
    for (i = 1; i <= NF; i++) {
      if ($(i + 1) ~ /^passed/) passed += $i
      if ($(i + 1) ~ /^failed/) failed += $i
      if ($(i + 1) ~ /^ignored/) ignored += $i
    }
  }
  /^test .* \.\.\. ignored/ {
    name = $2; sub(/^test /, ""); reason = $0; sub(/^[^,]*ignored,? ?/, "", reason)
    skips[++skipped] = name ": " (reason == "" ? "marked #[ignore]" : reason)
  }
  /^SKIPPED / {
    line = $0; sub(/^SKIPPED /, "", line); skips[++skipped] = line
    if (line !~ /^conformance /) self_skipped++
  }
  /^CONFORMANCE .*: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped/ {
    runs++; line = $0; sub(/^[^:]*: /, "", line); split(line, n, /[ ,]+/)
    conformance_passed += n[1]; conformance_failed += n[3]; conformance_skipped += n[5]
  }
  END {
    if (skipped > 0) {
      print ""
      print "Skipped:"
      for (i = 1; i <= skipped; i++) print "  " skips[i]
    }
    total_passed = passed - self_skipped + conformance_passed
    total_failed = failed + conformance_failed
    if (status != 0 && total_failed == 0) total_failed = 1
    total_skipped = ignored + self_skipped + conformance_skipped
    printf "\n%d test binaries and %d conformance runs, in about %d min\n", binaries, runs, minutes
    printf "%d passed, %d failed, %d skipped\n", total_passed, total_failed, total_skipped
  }'
exit "$status"
