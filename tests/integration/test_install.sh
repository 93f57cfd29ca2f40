# test_install.sh - `make install` puts a working binary, library, headers and man page
# under PREFIX, and a C program builds against the installed library alone.
. "$(dirname "$0")/lib.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
prefix="$T/prefix"
make -s -C "$root" install PREFIX="$prefix" BUILD="$BUILD" BINDIR="$(dirname "$DTRAIN")" >"$T/install.log" 2>&1
check "make install succeeds" test $? -eq 0 -a -x "$prefix/bin/dtrain"
expect_status 0 "installed dtrain runs" "$prefix/bin/dtrain" --version
check "libdtrain.a installed" test -s "$prefix/lib/libdtrain.a"
check "public headers installed" test -s "$prefix/include/dtrain/comm/comm.h" -a -s "$prefix/include/dtrain/comm/store.h"
check "man page installed" grep -q '^\.TH DTRAIN 1' "$prefix/share/man/man1/dtrain.1"

# A user's program: only the installed header and library.
cat > "$T/user.c" <<'C'
#include "base/error.h"
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
