/* adapter.c - the table of scheduler adapters and the helpers they share.
 *
 * One line per adapter: a new scheduler is a new file plus its line here.
 */
#include "scheduler-adapters/adapter.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each adapter file defines one of these; list it below when it lands. */
extern const struct dt_adapter dt_adapter_local;
extern const struct dt_adapter dt_adapter_kubernetes;
extern const struct dt_adapter dt_adapter_slurm;
extern const struct dt_adapter dt_adapter_mpirun;

static const struct dt_adapter *const adapters[] = {
    &dt_adapter_local,
    &dt_adapter_kubernetes,
    &dt_adapter_slurm,
    &dt_adapter_mpirun,
    NULL,
};

const struct dt_adapter *dt_adapter_for(enum dt_scheduler s)
{
    for (size_t i = 0; adapters[i]; i++)
        if (adapters[i]->scheduler == s)
            return adapters[i];
    return NULL;
}

const struct dt_adapter *dt_adapter_by_name(const char *name)
{
    if (strcmp(name, "k8s") == 0)
        name = "kubernetes";
    for (size_t i = 0; adapters[i]; i++)
        if (strcmp(adapters[i]->name, name) == 0)
            return adapters[i];
    return NULL;
}

const char *dt_adapter_getenv(char *const *env, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; env && env[i]; i++)
        if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}

/* $'...' (bash, zsh, ksh): the word's control characters as escapes, so
 * it stays on its line; a quote and a backslash escaped too. */
static void put_ansi_c(FILE *out, const char *s)
{
    fputs("$'", out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\'' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
    fputc('\'', out);
}

void dt_adapter_put_word(FILE *out, const char *s)
{
    static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%";
    if (*s && strspn(s, plain) == strlen(s)) {
        fputs(s, out);
        return;
    }
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) {
            put_ansi_c(out, s);
            return;
        }
    fputc('\'', out);
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", out);
        else
            fputc(*s, out);
    fputc('\'', out);
}

void dt_adapter_put_comment(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p >= 0x20 && *p != 0x7f)
            fputc(*p, out);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\r')
            fputs("\\r", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else
            fprintf(out, "\\x%02x", *p);
    }
}

/* True when `word` is a whole line of `text`. */
static bool has_line(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = text; (p = strstr(p, word)) != NULL; p += n)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return true;
    return false;
}

void dt_adapter_put_heredoc(FILE *out, const char *word, const char *text)
{
    char end[48];
    snprintf(end, sizeof end, "%s", word);
    for (int i = 1; has_line(text, end); i++)
        snprintf(end, sizeof end, "%.32s_%d", word, i);
    size_t len = strlen(text);
    fprintf(out, "'%s'\n%s%s%s\n", end, text, len && text[len - 1] != '\n' ? "\n" : "", end);
}

char *dt_adapter_setup_script(const struct dt_job *job)
{
    if (!job->setup)
        return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return NULL;
    fputs("set -e\n", m);
    for (int i = 0; i < job->n_setup; i++)
        fprintf(m, "%s\n", job->setup[i]);
    fputs("exec \"$@\"\n", m);
    if (fclose(m) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* The length of an entry's name: up to '=' or the end. */
static size_t name_len(const char *entry)
{
    return strcspn(entry, "=");
}

/* The index in set of the entry naming the same variable as e, or -1. */
static int in_set(char *const *set, const char *e)
{
    size_t n = name_len(e);
    for (int i = 0; set && set[i]; i++)
        if (name_len(set[i]) == n && strncmp(set[i], e, n) == 0)
            return i;
    return -1;
}

void dt_adapter_env_free(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}

char **dt_adapter_env_with(char *const *env, char *const *set)
{
    size_t n = 0, k = 0, s = 0;
    while (env && env[n])
        n++;
    while (set && set[s])
        s++;
    char **out = calloc(n + s + 1, sizeof *out);
    bool ok = out != NULL;
    for (size_t i = 0; ok && i < n; i++)
        if (in_set(set, env[i]) < 0)
            ok = (out[k++] = strdup(env[i])) != NULL;
    for (size_t i = 0; ok && i < s; i++)
        if (set[i][name_len(set[i])] == '=')
            ok = (out[k++] = strdup(set[i])) != NULL;
    if (ok)
        return out;
    dt_adapter_env_free(out);
    dt_error_set(DT_ENOMEM, "out of memory building a helper's environment");
    return NULL;
}
