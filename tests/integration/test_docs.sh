#!/usr/bin/env bash
# test_docs.sh - every fenced block of README.md and docs/*.md runs or validates
# as written (tests/integration/doc_blocks.py says how each kind is checked and
# how a fence says what its block is).  First the checker is shown to catch
# what it must on a made-up page: an unclassified fence, a spec with a typo, a
# renamed option, a command that fails, a no-run block without a reason, a
# misplaced doc-test comment, and a .venv on PATH leaking into a block; then
# the real docs, one line per block.
. "$(dirname "$0")/lib.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
blocks() {
  python3 "$root/tests/integration/doc_blocks.py" --dtrain "$DTRAIN" --repo "$root" \
    --timeout "$(limit_s 120)" "$@"
}

# --- the checker on a page with known faults ------------------------------------
mkdir -p "$T/venv/.venv/bin"
printf '#!/bin/sh\nexit 0\n' >"$T/venv/.venv/bin/doc-test-probe"
chmod +x "$T/venv/.venv/bin/doc-test-probe"
f='```'
cat >"$T/page.md" <<EOF
# a page
$f
bare fence
$f
$f yaml
# tiny.yaml
name: tiny
nproc_per_node: 2
command: [sh, -c, 'echo rank \$RANK']
$f
$f yaml
nproc_pernode: 2
$f
$f sh
dtrain validate tiny.yaml && dtrain launch tiny.yaml && touch "\$MARK"
! command -v doc-test-probe
$f
$f sh
dtrain launch --no-such-option tiny.yaml
$f
$f sh
false
$f
<!-- doc-test: no-run: -->
$f sh
dtrain launch tiny.yaml
$f
$f usage
dtrain validate [--prnt] JOB.yaml
$f
$f console
\$ dtrain statuss tiny
state: running
$f
<!-- doc-test: no-run: a comment a blank line away from its fence -->

$f text
$f
EOF
MARK="$T/mark" PATH="$T/venv/.venv/bin:$PATH" blocks --scratch "$T/page" "$T/page.md" >"$T/page.out" 2>&1
st=$?
check "the checker fails a page with faults" test "$st" = 1
check "a block that runs is run (dtrain on PATH, .venv/bin not)" test -f "$T/mark"
contains "$T/page.out" "^ok - .*page.md:[0-9]+ sh: ran in" "a good sh block passes"
n_bad=$(grep -c '^not ok - ' "$T/page.out")
check "exactly the 8 faults fail ($n_bad)" test "$n_bad" = 8
contains "$T/page.out" "^not ok - .*page.md:2 \(bare\): fence info string" "a bare fence fails"
contains "$T/page.out" "page.md:[0-9]+:1: unknown key 'nproc_pernode'" \
  "a spec with a typo fails, at the doc's line"
contains "$T/page.out" "dtrain launch has no option --no-such-option" "a renamed option fails"
contains "$T/page.out" "^not ok - .*sh: ran in [0-9.]+ s: false" "a failing command fails"
contains "$T/page.out" "no-run needs a reason" "no-run without a reason fails"
contains "$T/page.out" "dtrain validate has no option --prnt" "a synopsis with a wrong option fails"
contains "$T/page.out" "'dtrain statuss' is not a command" "a console command that is no command fails"
contains "$T/page.out" "^not ok - .*page.md:[0-9]+: a doc-test comment must be on the line" \
  "a doc-test comment away from any fence fails"

# --- the docs ---------------------------------------------------------------------
blocks --scratch "$T/docs" "$root/README.md" "$root"/docs/*.md
