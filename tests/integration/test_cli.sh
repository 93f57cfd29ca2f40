# test_cli.sh - the CLI answers --help, --version and unknown commands sensibly.
. "$(dirname "$0")/lib.sh"

expect_status 0 "dtrain --help exits 0" "$DTRAIN" --help
contains "$T/last.out" "Usage: dtrain <command>" "--help shows usage"
expect_status 0 "dtrain --version exits 0" "$DTRAIN" --version
contains "$T/last.out" "^dtrain [0-9]+\.[0-9]+\.[0-9]+" "--version prints a version"
expect_status 2 "unknown command exits 2" "$DTRAIN" frobnicate
contains "$T/last.err" "not a dtrain command" "unknown command is named"
expect_status 2 "no command exits 2" "$DTRAIN"
# The command lines of --help: two spaces, a name, its summary (under group headings).
cmds=$("$DTRAIN" --help | awk '/^Options:/{exit} /^  [a-z][a-z_]* /{print $1}')
have=$(ls "$(dirname "$0")"/../../launcher/cli/cmd_*.c | sed 's|.*/cmd_||; s|\.c$||' | sort | tr '\n' ' ')
check "--help lists every command once (launcher/cli/cmd_*.c)" \
  test "$(printf '%s\n' $cmds | sort | tr '\n' ' ')" = "$have"
check "--help lists launch, validate and render first, in that order" \
  test "$(printf '%s\n' $cmds | head -n 3 | tr '\n' ' ')" = "launch validate render "
for cmd in $cmds; do
  expect_status 0 "dtrain $cmd --help exits 0" "$DTRAIN" "$cmd" --help
  contains "$T/last.out" "Usage: dtrain $cmd" "dtrain $cmd --help shows its usage"
done
expect_status 0 "dtrain version exits 0" "$DTRAIN" version
contains "$T/last.out" "^cuda: (yes \(NCCL [0-9]+\.[0-9]+\.[0-9]+ backend|no \()" \
  "version says whether CUDA is built in, with the version of the NCCL library it loads"
contains "$T/last.out" "^mpi: (yes|no) \(" "version says whether the MPI backend is built in"
