# test_generated.sh - the committed files that `make generated` writes are what the key tables give.
#
# configs/job.schema.json, configs/reference.yaml and the key tables of
# docs/dtrain.1 and README.md are written from the job spec's key tables
# (spec/jobspec*.c) by $BUILD/specgen; a table edited without `make
# generated` leaves one of them stale, and this test says which and how
# (a diff).  The generator also refuses a document whose markers are gone
# rather than dropping its tables, and the generated schema is checked
# against the spec parser by test_validate_schema.sh.
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

SPECGEN=${BUILD:?BUILD must point at the build folder}/specgen
if [ ! -x "$SPECGEN" ]; then
  not_ok "$SPECGEN is built (make $SPECGEN, or make test-only)"
  exit 1
fi

# same WHAT COMMITTED GENERATED: ok when equal, else the diff.
same() {
  if diff -u "$2" "$3" > "$T/diff"; then
    ok "$1 is what the key tables give"
  else
    not_ok "$1 is what the key tables give (run make generated; - committed, + generated)"
    sed 's/^/    /' "$T/diff" | head -n 40
  fi
}

"$SPECGEN" schema > "$T/schema.json" && same configs/job.schema.json configs/job.schema.json "$T/schema.json"
"$SPECGEN" reference > "$T/reference.yaml" && same configs/reference.yaml configs/reference.yaml "$T/reference.yaml"
"$SPECGEN" man < docs/dtrain.1 > "$T/dtrain.1" && same "docs/dtrain.1's key tables" docs/dtrain.1 "$T/dtrain.1"
"$SPECGEN" markdown < README.md > "$T/README.md" && same "README.md's key tables" README.md "$T/README.md"

# Each generated document names every key the parser knows.
"$DTRAIN" validate --list-keys > "$T/keys"
check "the parser lists keys" test -s "$T/keys"
missing=""
while read -r key; do
  leaf=${key##*.}
  grep -Fq "$leaf:" configs/reference.yaml || missing="$missing $key"
done < "$T/keys"
check "configs/reference.yaml shows every key${missing:+ (missing:$missing)}" test -z "$missing"
missing=""
while read -r key; do
  rel=${key#*.}
  case "$key" in *.*) ;; *) rel=$key ;; esac
  grep -Fq "| \`$rel\` |" README.md || missing="$missing $key"
done < "$T/keys"
check "README.md's tables have a row for every key${missing:+ (missing:$missing)}" test -z "$missing"

# A document without its markers is refused, naming the marker, not written without its tables.
printf '.TH X 1\n.SH JOB SPEC\nno markers\n' > "$T/nomarker.1"
expect_status 1 "specgen man refuses a page without its BEGIN KEYS line" "$SPECGEN" man < "$T/nomarker.1"
contains "$T/last.err" "BEGIN KEYS" "the refusal names the missing marker"
printf '<!-- BEGIN KEYS -->\nold rows\n' > "$T/noend.md"
expect_status 1 "specgen markdown refuses a file whose tables have no END KEYS line" "$SPECGEN" markdown \
  < "$T/noend.md"
contains "$T/last.err" "END KEYS" "the refusal names the missing END marker"
expect_status 2 "specgen without a document to write says how to call it" "$SPECGEN"
