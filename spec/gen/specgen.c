/* specgen.c - writes the job spec's generated files from the key tables (`make generated`).
 *
 *   specgen schema       > configs/job.schema.json
 *   specgen reference    > configs/reference.yaml
 *   specgen man      < docs/dtrain.1 > docs/dtrain.1.new   (the lines between its KEYS markers)
 *   specgen markdown < README.md     > README.md.new
 *
 * Built from libdtrain.a (the tables) and jansson; not installed.  The
 * Makefile's `generated` target runs each into a temporary file and moves
 * it over the committed one; tests/integration/test_generated.sh compares.
 */
#include "spec/gen/specgen.h"

#include "base/error.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *what = argc == 2 ? argv[1] : "";
    int rc;
    if (!strcmp(what, "schema"))
        rc = dt_gen_schema(stdout);
    else if (!strcmp(what, "reference"))
        rc = dt_gen_reference(stdout);
    else if (!strcmp(what, "man"))
        rc = dt_gen_man(stdin, stdout);
    else if (!strcmp(what, "markdown"))
        rc = dt_gen_markdown(stdin, stdout);
    else {
        fprintf(stderr, "usage: specgen schema|reference|man|markdown (man and markdown filter stdin)\n");
        return 2;
    }
    if (rc == 0 && (fflush(stdout) || ferror(stdout)))
        rc = dt_error_set(DT_EIO, "specgen: cannot write the output");
    if (rc)
        fprintf(stderr, "%s\n", dt_error_last());
    return rc ? 1 : 0;
}
