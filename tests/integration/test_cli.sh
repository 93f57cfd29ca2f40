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

# Every command reads its options with getopt_long (launcher/cli/cli_opts.c): the same words for
# the same mistakes, options before or after operands, "--" ending them, --opt=VALUE.
for cmd in launch validate render agent status logs cancel list report sample "export hf" "data bytes" "trace merge" coordinator; do
  expect_status 2 "dtrain $cmd --frobnicate: unknown option" "$DTRAIN" $cmd --frobnicate
  contains "$T/last.err" "^dtrain ${cmd%% *}: unknown option '--frobnicate'$" "dtrain $cmd names it"
done
expect_status 2 "a value missing at the end" "$DTRAIN" logs run-x --rank
contains "$T/last.err" "^dtrain logs: '--rank' needs a value$" "the option is named"
expect_status 2 "a value given to an option that takes none" "$DTRAIN" launch --dry-run=1 job.yaml
contains "$T/last.err" "^dtrain launch: '--dry-run' takes no value$" "the option is named"
expect_status 2 "a prefix of several options" "$DTRAIN" launch --d job.yaml
contains "$T/last.err" "^dtrain launch: '--d' is short for several options: --detach, --dry-run$" "they are named"
printf 'name: j\ncommand: ["true"]\n' >"$T/j.yaml"
expect_status 0 "options after the operand, --opt=VALUE and a unique prefix" \
  "$DTRAIN" launch "$T/j.yaml" --set=max_restarts=2 --dry
contains "$T/last.out" "dry-run" "launch --dry is --dry-run"
expect_status 2 "after --, an operand that looks like an option is one" "$DTRAIN" validate -- --print
contains "$T/last.err" "^--print: cannot open" "validate read --print as a file name"
expect_status 2 "bench: an unknown option is named too" "$DTRAIN" bench allreduce --frob
contains "$T/last.err" "^dtrain bench: unknown option '--frob'$" "dtrain bench names it"
