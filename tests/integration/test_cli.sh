# test_cli.sh - the CLI answers --help, --version and unknown commands sensibly.
. "$(dirname "$0")/lib.sh"

expect_status 0 "dtrain --help exits 0" "$DTRAIN" --help
contains "$T/last.out" "Usage: dtrain <command>" "--help shows usage"
expect_status 0 "dtrain --version exits 0" "$DTRAIN" --version
contains "$T/last.out" "^dtrain [0-9]+\.[0-9]+\.[0-9]+" "--version prints a version"
expect_status 2 "unknown command exits 2" "$DTRAIN" frobnicate
contains "$T/last.err" "not a dtrain command" "unknown command is named"
expect_status 2 "no command exits 2" "$DTRAIN"
for cmd in $("$DTRAIN" --help | awk '/^Commands:/{f=1;next} f&&/^  [a-z]/{print $1}'); do
  expect_status 0 "dtrain $cmd --help exits 0" "$DTRAIN" "$cmd" --help
  contains "$T/last.out" "Usage: dtrain $cmd" "dtrain $cmd --help shows its usage"
done
