/* shm.c - the shared-memory backend (same-host ranks).  This first version
 * only reports that it is not available; `auto` picks tcp meanwhile. */
#include "comm/comm_backend.h"
#include "comm/error.h"

static int shm_init(const struct dt_comm_options *o, void **st)
{
    (void)o;
    (void)st;
    return dt_error_set(DT_EUNSUPPORTED, "communicator backend 'shm' is not available in this build; use tcp");
}

const struct dt_comm_backend dt_comm_backend_shm = {.name = "shm", .init = shm_init};
