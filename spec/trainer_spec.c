/* trainer_spec.c - defaults of the trainer section (trainer_spec.h), read from its key table.
 *
 * The table (spec/jobspec_trainer.c) holds each key's default once: the
 * parser, the trainer, the generated schema and docs all read it there.
 */
#include "spec/trainer_spec.h"

#include "spec/jobspec_keys.h"

#include <string.h>

void dt_trainer_spec_defaults(struct dt_trainer_spec *t)
{
    memset(t, 0, sizeof *t);
    /* The table's defaults are numbers and fixed buffers, nothing allocated,
     * and each is read by its own key in tests/unit/test_jobspec_defaults.c,
     * so this cannot fail. */
    (void)dt_spec_init(&dt_jobspec_trainer_section, t);
}

enum dt_elastic_batch dt_trainer_elastic_batch(const struct dt_trainer_spec *t)
{
    if (t->ddp.elastic_batch != DT_ELASTIC_BATCH_AUTO)
        return t->ddp.elastic_batch;
    return strcmp(t->data.dataset, "tokens") == 0 ? DT_ELASTIC_BATCH_GLOBAL : DT_ELASTIC_BATCH_PER_RANK;
}
