/* jobspec_suggest.c - "did you mean" for unknown keys, from the same key tables the parser uses.
 *
 * Distance is optimal string alignment (Levenshtein plus adjacent swaps, the
 * commonest typo), computed on a normalised spelling so that Nodes or
 * nproc-per-node find nodes and nproc_per_node at once.
 *
 * Not for deciding whether a key is known (jobspec_keys.c does that).
 */
#include "spec/jobspec_keys.h"

#include <ctype.h>
#include <string.h>

#define SUGGEST_MAX_LEN 64 /* longer names are not typos of a known key */

static void normalise(const char *in, char *out, size_t size)
{
    size_t i = 0;
    for (; in[i] && i + 1 < size; i++)
        out[i] = in[i] == '-' ? '_' : (char)tolower((unsigned char)in[i]);
    out[i] = '\0';
}

static size_t osa_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    size_t d[SUGGEST_MAX_LEN + 1][SUGGEST_MAX_LEN + 1];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best)
                best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

/* Distance from the normalised `a` to `known`, or (size_t)-1 when too far
 * to be a typo: 1 edit up to 4 letters, 2 up to 8, 3 beyond; case and '-'
 * for '_' are free.  Values of 3 letters get no edits at all: gpu is not a
 * typo of cpu, nor tcp of mpi. */
static size_t typo_distance(const char *a, const char *known, int is_value)
{
    char b[SUGGEST_MAX_LEN + 1];
    size_t len = strlen(known);
    if (len > SUGGEST_MAX_LEN)
        return (size_t)-1;
    normalise(known, b, sizeof b);
    size_t limit = len <= 3 && is_value ? 0 : len <= 4 ? 1 : len <= 8 ? 2 : 3;
    size_t d = osa_distance(a, b);
    return d <= limit ? d : (size_t)-1;
}

const char *dt_spec_suggest(const struct dt_spec_section *sec, const char *name)
{
    char a[SUGGEST_MAX_LEN + 1];
    if (strlen(name) > SUGGEST_MAX_LEN)
        return NULL;
    normalise(name, a, sizeof a);
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < sec->n_keys; i++) {
        size_t d = typo_distance(a, sec->keys[i].name, 0);
        if (d < best_d) {
            best = sec->keys[i].name;
            best_d = d;
        }
    }
    return best;
}

const char *dt_spec_suggest_word(const char *const *words, const char *text)
{
    char a[SUGGEST_MAX_LEN + 1];
    if (strlen(text) > SUGGEST_MAX_LEN)
        return NULL;
    normalise(text, a, sizeof a);
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; words[i]; i++) {
        size_t d = typo_distance(a, words[i], 1);
        if (d < best_d) {
            best = words[i];
            best_d = d;
        }
    }
    return best;
}

static int find_in(const struct dt_spec_section *sec, const struct dt_spec_section *not_in, const char *name,
                   const char *prefix, char *buf, size_t size, int depth)
{
    if (depth > 8)
        return 0;
    for (size_t i = 0; sec != not_in && i < sec->n_keys; i++) {
        if (strcmp(sec->keys[i].name, name) == 0) {
            snprintf(buf, size, "%s%s%s", prefix, *prefix ? "." : "", name);
            return 1;
        }
    }
    for (size_t i = 0; i < sec->n_keys; i++) {
        const struct dt_spec_key *k = &sec->keys[i];
        if (k->type != DT_KT_SECTION && k->type != DT_KT_SECTION_PTR && k->type != DT_KT_SECLIST)
            continue;
        char path[256];
        snprintf(path, sizeof path, "%s%s%s%s", prefix, *prefix ? "." : "", k->name,
                 k->type == DT_KT_SECLIST ? "[]" : "");
        if (find_in(k->sub, not_in, name, path, buf, size, depth + 1))
            return 1;
    }
    return 0;
}

const char *dt_spec_find_elsewhere(const struct dt_spec_section *root, const struct dt_spec_section *not_in,
                                   const char *name, char *buf, size_t size)
{
    if (!root || strlen(name) > SUGGEST_MAX_LEN)
        return NULL;
    return find_in(root, not_in, name, "", buf, size, 0) ? buf : NULL;
}
