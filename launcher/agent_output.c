/* agent_output.c - the pure parts of rank output handling: the "[rank N]"
 * prefix and the stderr tail kept for the failure summary.
 *
 * Nothing here reads pipes or writes files (agent_console.c does); these
 * functions only shape bytes, so the unit tests can drive them directly.
 */
#include "launcher/agent.h"

#include <string.h>

size_t dt_agent_format_line(char *out, int rank, const char *line, size_t len)
{
    /* Hand-rolled rather than snprintf: this runs once per line of output. */
    char digits[16];
    int nd = 0;
    unsigned v = rank < 0 ? 0u : (unsigned)rank;
    do {
        digits[nd++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    size_t o = 0;
    memcpy(out, "[rank ", 6);
    o = 6;
    while (nd > 0)
        out[o++] = digits[--nd];
    out[o++] = ']';
    out[o++] = ' ';
    memcpy(out + o, line, len);
    o += len;
    out[o++] = '\n';
    return o;
}

void dt_agent_tail_push(struct dt_agent_tail *t, const char *line, size_t len, bool complete)
{
    if (t->continuing) {
        /* Rest of a long line whose start is already kept: the start is what matters. */
        t->continuing = !complete;
        return;
    }
    char *dst = t->lines[t->next];
    size_t keep = len < DT_AGENT_TAIL_WIDTH - 1 ? len : DT_AGENT_TAIL_WIDTH - 1;
    memcpy(dst, line, keep);
    dst[keep] = 0;
    if (keep < len && keep >= 3)
        memcpy(dst + keep - 3, "...", 3);
    t->next = (t->next + 1) % DT_AGENT_TAIL_LINES;
    if (t->count < DT_AGENT_TAIL_LINES)
        t->count++;
    t->continuing = !complete;
}

int dt_agent_tail_copy(const struct dt_agent_tail *t, char out[][DT_AGENT_TAIL_WIDTH])
{
    int first = (t->next - t->count + DT_AGENT_TAIL_LINES) % DT_AGENT_TAIL_LINES;
    for (int i = 0; i < t->count; i++)
        memcpy(out[i], t->lines[(first + i) % DT_AGENT_TAIL_LINES], DT_AGENT_TAIL_WIDTH);
    return t->count;
}
