# test_install.sh - `make install` puts a working binary, library, headers, man page and
# docs under PREFIX, a C program builds against the installed library alone, and the man
# page names every command and every job spec key, and points at files that are there.
# run-tests: uses make
. "$(dirname "$0")/lib.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
prefix="$T/prefix"
make -s -C "$root" install PREFIX="$prefix" BUILD="$BUILD" BINDIR="$(dirname "$DTRAIN")" >"$T/install.log" 2>&1
check "make install succeeds" test $? -eq 0 -a -x "$prefix/bin/dtrain"
expect_status 0 "installed dtrain runs" "$prefix/bin/dtrain" --version
check "libdtrain.a installed" test -s "$prefix/lib/libdtrain.a"
check "public headers installed" test -s "$prefix/include/dtrain/comm/comm.h" -a -s "$prefix/include/dtrain/comm/store.h"
man1="$prefix/share/man/man1/dtrain.1"
check "man page installed" grep -q '^\.TH DTRAIN 1' "$man1"
check "the man page's @DOCDIR@ is replaced by the installed docs folder" \
  sh -c "! grep -q @DOCDIR@ '$man1' && grep -q '$prefix/share/doc/dtrain' '$man1'"
for f in README.md architecture.md launch.md reference.yaml job.schema.json; do
  check "docs installed: $f" test -s "$prefix/share/doc/dtrain/$f"
done
# Roff to text without hyphenation or line breaks inside words (MANWIDTH wide).
MANWIDTH=400 man -l "$man1" 2>/dev/null | sed 's/\xe2\x80\x90//g' > "$T/man.txt"
missing=""
for cmd in $("$DTRAIN" --help | awk '/^Options:/{exit} /^  [a-z][a-z_]* /{print $1}'); do
  grep -Eq "^ +(dtrain )?$cmd( |$)" "$T/man.txt" || missing="$missing $cmd"
done
check "the man page describes every command of dtrain --help${missing:+ (missing:$missing)}" test -z "$missing"
missing=""
for key in $("$DTRAIN" validate --list-keys); do
  case "$key" in
    *"[]."*) # an item key of a list: the list's entry names it
      grep -Fq "${key%%\[\]*}" "$T/man.txt" && grep -Fq "${key##*\[\].}" "$T/man.txt" || missing="$missing $key" ;;
    *) # a key, or a section whose keys are listed as section.key
      grep -Eq "(^| |, )$key(,|\.[a-z]|$| )" "$T/man.txt" || missing="$missing $key" ;;
  esac
done
check "the man page lists every job spec key${missing:+ (missing:$missing)}" test -z "$missing"

# A user's program: only the installed header and library.
cat > "$T/user.c" <<'C'
#include "base/error.h"
#include "comm/comm.h"
#include "comm/store.h"
#include <stdio.h>
#include <string.h>
int main(void)
{
    int rc = dt_error_set(DT_EINVAL, "from %s", "a user");
    return !(rc == DT_EINVAL && strcmp(dt_error_last(), "from a user") == 0);
}
C
san=""
nm "$prefix/lib/libdtrain.a" 2>/dev/null | grep -q __asan && san="-fsanitize=address,undefined"
cc -std=c11 $san -I"$prefix/include/dtrain" "$T/user.c" -L"$prefix/lib" -ldtrain -lm -lpthread -o "$T/user" 2>"$T/cc.err"
check "a C program links against the installed libdtrain.a" test -x "$T/user"
check "and runs" "$T/user"
