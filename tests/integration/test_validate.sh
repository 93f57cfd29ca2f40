# test_validate.sh - `dtrain validate` as a user meets it: summaries, exact error positions,
# and hostile input (tabs, garbage, NUL bytes, 10 MB files, billion laughs) giving status 2
# and a message, never a crash or a hang.
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

# bad NAME "<yaml as printf format>" "<position>" "<ERE on stderr>"
bad() {
  printf -- "$2" > "$T/$1.yaml"
  expect_status 2 "$1: exit status 2" "$DTRAIN" validate "$T/$1.yaml"
  contains "$T/last.err" "^$T/$1.yaml$3: .*$4" "$1: message names the position and the cause"
}

expect_status 0 "a valid spec exits 0" "$DTRAIN" validate configs/hello.yaml
contains "$T/last.out" "^configs/hello.yaml: ok: hello, local, 1 node x 4 ranks, command: sh -c echo rank" \
  "a valid spec gets a one-line summary"
expect_status 0 "the reference spec is valid" "$DTRAIN" validate configs/reference.yaml
contains "$T/last.out" "trainer: mlp on cpu" "a trainer job's summary names the trainer"

bad typo 'name: t\nnproc_pernode: 4\ncommand: [a]\n' ":2:1" "unknown key 'nproc_pernode' in the top level; did you mean 'nproc_per_node'\\?"
bad duration 'name: t\ncommand: [a]\nrendezvous:\n  timeout: abc\n' ":4:12" "rendezvous.timeout: expected a duration like 30s, 10m or 500ms, got 'abc'"
bad tabs 'name: t\ncommand: [a]\nrendezvous:\n\ttimeout: 3s\n' ":4:1" "YAML indentation uses spaces, not tabs"
bad empty '' ":1:1" "the file is empty"
bad comments '# nothing\n# here\n' ":1:1" "the file is empty"
bad toplist '- name: t\n' ":1:1" "top level must be a mapping"
bad topscalar 'name\n' ":1:1" "top level must be a mapping"
bad both 'name: t\ncommand: [a]\ntrainer: {}\n' ":3:1" "both command and trainer"
bad neither 'name: t\n' ":1:1" "neither command nor trainer"
bad noname 'command: [a]\n' ":1:1" "missing required key 'name'"
bad type 'name: t\ncommand: [a]\nnodes: two\n' ":3:8" "nodes: expected an integer, got 'two'"
bad range 'name: t\ncommand: [a]\nrendezvous: {port: 70000}\n' ":3:20" "expected an integer from 0 to 65535"
bad onecycle 'name: t\ntrainer:\n  scheduler: {type: onecycle}\n' ":3:14" "onecycle needs max_lr"
bad dup 'name: t\ncommand: [a]\nname: u\n' ":3:1" "duplicate key 'name'"
bad docs 'name: t\ncommand: [a]\n---\nname: u\n' ":3:1" "a second YAML document"
bad syntax 'name: [t\ncommand: [a]\n' ":2:8" "YAML syntax error"
bad nul 'name: t\ncommand: [a]\n\0\0\0\n' ":3:1" "a NUL byte"
bad utf8 'name: t\ncommand: [\xff\xfe]\n' ":2:11" "UTF-8"
bad alias 'a: &a [x, x, x]\nb: [*a, *a, *a]\n' ":1:4" "anchors"

# Billion laughs: refused at the first anchor, in no time.
{ echo 'a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]'
  for i in $(seq 1 9); do echo "a$i: &a$i [*a$((i-1)), *a$((i-1)), *a$((i-1)), *a$((i-1)), *a$((i-1)), *a$((i-1))]"; done
} > "$T/laughs.yaml"
expect_status 2 "billion laughs: exit status 2" timeout 5 "$DTRAIN" validate "$T/laughs.yaml"

python3 -c "print('a: ' + '[' * 100000)" > "$T/deep.yaml"
bad_deep() { expect_status 2 "deep nesting: exit status 2" timeout 5 "$DTRAIN" validate "$T/deep.yaml"; }
bad_deep
contains "$T/last.err" "deep.yaml:1:35: nesting deeper than 32 levels" "deep nesting: refused at the 33rd level"

head -c $((10 * 1024 * 1024)) /dev/zero | tr '\0' '#' > "$T/big.yaml"
expect_status 2 "10 MB file: exit status 2" "$DTRAIN" validate "$T/big.yaml"
contains "$T/last.err" "big.yaml: the file is 10485760 bytes; a job spec may be at most 1048576 bytes \(1 MiB\)" \
  "10 MB file: the message gives both sizes"

python3 -c "print('name: t\ncommand: [a]\n' + 'k' * 500000 + ': 1')" > "$T/longkey.yaml"
expect_status 2 "a 500 kB key: exit status 2" timeout 5 "$DTRAIN" validate "$T/longkey.yaml"
contains "$T/last.err" "longkey.yaml:3:" "a 500 kB key: the message names its line"
python3 -c "print('name: t\ncommand: [a]\nlog_dir: ' + 'v' * 900000)" > "$T/longval.yaml"
expect_status 0 "a 900 kB value is read" timeout 5 "$DTRAIN" validate "$T/longval.yaml"
python3 -c "print('name: t\ncommand: [a]\nenv:\n' + ''.join('  K%d: v\n' % i for i in range(60000)))" > "$T/manykeys.yaml"
expect_status 0 "60000 env keys are read in time" timeout "$(limit_s 5)" "$DTRAIN" validate "$T/manykeys.yaml"

# Random bytes: always status 2 and a message naming the file, never a signal.
crashes=0
for i in $(seq 1 40); do
  head -c $((RANDOM % 4096 + 1)) /dev/urandom > "$T/garbage$i.yaml"
  timeout 5 "$DTRAIN" validate "$T/garbage$i.yaml" > /dev/null 2> "$T/garbage.err"
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q "^$T/garbage$i.yaml" "$T/garbage.err"; then
    crashes=$((crashes + 1)); echo "    garbage$i: exit $rc: $(head -c 200 "$T/garbage.err")"
    cp "$T/garbage$i.yaml" "/tmp/dtrain-garbage-$i.yaml"
  fi
done
check "40 files of /dev/urandom garbage each give status 2 and a message" test $crashes -eq 0
# Printable garbage gets past the NUL check and into the YAML parser and key tables.
crashes=0
for i in $(seq 1 40); do
  head -c 2048 /dev/urandom | tr -dc 'a-z:{}[], \n\t"#&*!-' > "$T/text$i.yaml"
  timeout 5 "$DTRAIN" validate "$T/text$i.yaml" > /dev/null 2>&1
  rc=$?
  [ $rc -eq 2 ] || { crashes=$((crashes + 1)); cp "$T/text$i.yaml" "/tmp/dtrain-text-$i.yaml"; }
done
check "40 files of printable garbage each give status 2" test $crashes -eq 0

# Several files: each judged; any bad one makes the status 2.
printf 'name: x\nnodes: 0\ncommand: [a]\n' > "$T/zero.yaml"
expect_status 2 "a good and a bad file: exit status 2" "$DTRAIN" validate configs/hello.yaml "$T/zero.yaml"
contains "$T/last.out" "^configs/hello.yaml: ok" "the good file is still summarised"
contains "$T/last.err" "zero.yaml:2:8: nodes: expected an integer from 1 to 65536, got '0'" "the bad file is explained"

expect_status 0 "stdin (-) is read" sh -c "\"$DTRAIN\" validate - < configs/hello.yaml"
contains "$T/last.out" "^-: ok: hello" "stdin gets a summary"
expect_status 2 "a missing file: exit status 2" "$DTRAIN" validate "$T/nope.yaml"
contains "$T/last.err" "nope.yaml: cannot open: No such file or directory" "a missing file is named"
expect_status 2 "a directory: exit status 2" "$DTRAIN" validate "$T"
expect_status 2 "no file: usage error" "$DTRAIN" validate
expect_status 2 "unknown option: usage error" "$DTRAIN" validate --frobnicate configs/hello.yaml
contains "$T/last.err" "unknown option '--frobnicate'" "unknown option is named"
expect_status 0 "--help exits 0" "$DTRAIN" validate --help
contains "$T/last.out" "Exit status: 0 if every file is valid, 2" "--help documents the exit status"

# print_round_trip SPEC PATTERN WHAT: `validate --print SPEC` exits 0 and its
# output matches PATTERN; that output is a valid spec which prints the same again.
print_round_trip() {
  expect_status 0 "--print $3 exits 0" "$DTRAIN" validate --print "$1"
  cp "$T/last.out" "$T/printed.yaml"
  contains "$T/printed.yaml" "$2" "--print $3: output matches '$2'"
  expect_status 0 "--print $3: its output is a valid spec" "$DTRAIN" validate --print "$T/printed.yaml"
  grep -v '^#' "$T/printed.yaml" > "$T/a.txt"; grep -v '^#' "$T/last.out" > "$T/b.txt"
  check "--print $3: its output prints the same again" cmp -s "$T/a.txt" "$T/b.txt"
}

# --print fills in and normalises values.
print_round_trip configs/reference.yaml "^    bucket_cap_mb: 25MiB" "of the reference spec"

# C1 controls and U+2028 may reach a spec through escapes; YAML 1.2 section 5.1 allows no C1
# control raw (libyaml refuses them, and folds NEL and U+2028 as line breaks), so --print
# escapes them again.
printf 'name: c1\ncommand: [a]\nenv: {K: "x\\x80\\x85 \\u2028 y"}\n' > "$T/c1.yaml"
print_round_trip "$T/c1.yaml" '"K": "x\\u0080\\u0085 \\u2028 y"' "of C1 controls, NEL and U+2028 (escaped)"
# The summary comment is one line whatever the command holds (a newline, NEL or
# U+2028 there would end the comment and leave the rest as YAML): shown as '?'.
printf 'name: c1cmd\ncommand: ["a\\nb: 1", "c\\x85d\\u2028e"]\n' > "$T/c1cmd.yaml"
print_round_trip "$T/c1cmd.yaml" '^# .*command: a\?b: 1 c\?d\?e$' "of a command with line breaks"

# rendezvous.timeout, the join timeout: 60s locally, torchrun's 600s where a scheduler
# starts the agents (a node may start minutes late), unless the spec sets it.
printf 'name: jt\ncommand: [a]\n' > "$T/jt-local.yaml"
printf 'name: jt\nscheduler: slurm\nnodes: 2\ncommand: [a]\n' > "$T/jt-slurm.yaml"
printf 'name: jt\nscheduler: slurm\nnodes: 2\ncommand: [a]\nrendezvous: {timeout: 45s}\n' > "$T/jt-set.yaml"
print_round_trip "$T/jt-local.yaml" "^  timeout: 60s$" "of a local job: the join timeout is 60s"
print_round_trip "$T/jt-slurm.yaml" "^  timeout: 600s$" "of a Slurm job: the join timeout is torchrun's 600s"
print_round_trip "$T/jt-set.yaml" "^  timeout: 45s$" "of a Slurm job that sets rendezvous.timeout: kept"
