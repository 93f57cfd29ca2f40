/* agent_error_file.c - the message in a rank's error report (TORCHELASTIC_ERROR_FILE).
 *
 * PyTorch's @record writes {"message": {"message": "ValueError: ...",
 * "extraInfo": {...}}}; a program of one's own may write {"message": "..."}.
 * Either way the first "message" whose value is a string is what a person
 * wants in the failure report, so that is all this reads: it is not a JSON
 * parser, and a file it cannot read leaves the message empty.
 */
#include "launcher/agent.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* Decodes the JSON string starting after its opening quote into out;
 * \uXXXX outside ASCII becomes '?', which is enough for a one-line report.
 * So does a raw NUL byte, alone or after a backslash: no JSON has one, and
 * copied as it is it would end the message there without a word. */
static void copy_json_string(const char *p, const char *end, char *out, size_t size)
{
    size_t o = 0;
    while (p < end && *p != '"' && o + 1 < size) {
        char c = *p++;
        if (c == '\\' && p < end) {
            char e = *p++;
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'u' ? '?' : e;
            if (e == 'u')
                p += (end - p) >= 4 ? 4 : end - p;
        }
        out[o++] = c ? c : '?';
    }
    out[o] = 0;
}

int dt_agent_error_message(const char *text, size_t len, char *out, size_t size)
{
    const char *end = text + len, *p = text;
    out[0] = 0;
    while ((p = memmem(p, (size_t)(end - p), "\"message\"", 9)) != NULL) {
        p += 9;
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ':'))
            p++;
        if (p < end && *p == '"') {
            copy_json_string(p + 1, end, out, size);
            return out[0] ? 0 : -1;
        }
    }
    return -1;
}

int dt_agent_error_file_message(const char *path, char *out, size_t size)
{
    char buf[65536];
    out[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n <= 0)
        return -1;
    return dt_agent_error_message(buf, (size_t)n, out, size);
}
