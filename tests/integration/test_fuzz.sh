# test_fuzz.sh - `make fuzz` builds every libFuzzer target and each runs clean for a few seconds.
#
# The Makefile pipes each run through `tail`, so its exit status says nothing;
# this test reads the output instead: every target must reach libFuzzer's
# closing "Done N runs" line, and nothing may say crash, leak, timeout or
# sanitizer error.  clang is a dependency (scripts/install-deps.sh); without
# it the test fails rather than skipping.
# run-tests: uses make
. "$(dirname "$0")/lib.sh"

secs=${DTRAIN_FUZZ_SECONDS:-4}
if ! command -v clang >/dev/null; then
  not_ok "clang is installed (scripts/install-deps.sh installs it)"
  exit 0
fi
ok "clang is installed"
targets=$(ls tests/fuzz/fuzz_*.c | wc -l)
DTRAIN_SKIP_PIP=1 make --no-print-directory -j"$(nproc)" fuzz FUZZ_SECONDS="$secs" >"$T/fuzz.log" 2>&1
rc=$?
check "make fuzz exits 0" test "$rc" = 0
runs=$(grep -cE '^Done [0-9]+ runs' "$T/fuzz.log")
if [ "$runs" = "$targets" ]; then ok "all $targets fuzz targets ran to the end"
else not_ok "only $runs of $targets fuzz targets ran to the end"; tail -n 30 "$T/fuzz.log" | sed 's/^/    /'
fi
if grep -Eq 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error|deadly signal|Test unit written|SUMMARY: ' "$T/fuzz.log"; then
  not_ok "fuzzing found no crash, leak or sanitizer error"; grep -E 'ERROR|runtime error|written|SUMMARY' "$T/fuzz.log" | head | sed 's/^/    /'
else ok "fuzzing found no crash, leak or sanitizer error"
fi
grep -E '^Done [0-9]+ runs' "$T/fuzz.log" | sed 's/^/# /'
