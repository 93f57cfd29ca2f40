/* yaml_escape.h - YAML double-quoted scalars that read back byte for byte,
 * so every module that writes YAML escapes the same characters.
 *
 * dt_yaml_put_quoted writes a string for the Kubernetes manifests
 * (scheduler-adapters/kubernetes/kubernetes_render.c) and `dtrain validate --print`
 * (spec/jobspec_print.c); dt_yaml_block_ok says whether text may stand
 * unescaped, as a literal block scalar; dt_yaml_char finds what a
 * one-line message or comment must not show raw (spec/jobspec_yaml.c's
 * dt_yaml_quote).  All follow one rule for which characters a YAML
 * document may hold as they are.
 *
 * Not a YAML reader (spec/jobspec_yaml.c, through libyaml) and not for
 * deciding whether a string needs quotes at all (kubernetes_render.c).
 */
#ifndef DT_YAML_ESCAPE_H
#define DT_YAML_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* How the C0 controls (0x00-0x1F) are written.  Either way '"' and '\\'
 * get a backslash, DEL, the C1 controls, U+2028, U+2029, U+FEFF, U+FFFE and
 * U+FFFF are escaped (\x7f, \u0085, ...: lowercase hex), and all other
 * UTF-8 is copied as it is. */
enum dt_yaml_style {
    DT_YAML_HEX,      /* all of them as \xXX */
    DT_YAML_SHORT_WS, /* \n and \t by name, the rest as \xXX: manifests stay readable */
};

/* Writes s (len bytes; NULs allowed) to f as a double-quoted scalar, quotes
 * included, on one line.  Returns 0, or DT_EINVAL having written nothing
 * when s is not UTF-8: YAML text is Unicode, and no escape reads back as a
 * byte that is not part of a character.  Write errors are left in f's
 * error flag for the caller's fclose/ferror. */
int dt_yaml_put_quoted(FILE *f, const char *s, size_t len, enum dt_yaml_style style);

/* 1 when s (len bytes) is UTF-8 that reads back as it is from a literal
 * block scalar: nothing dt_yaml_put_quoted would escape, except tab and
 * newline.  0 when it has to be quoted instead. */
int dt_yaml_block_ok(const char *s, size_t len);

/* The length of the UTF-8 character at s (len bytes left, len > 0), or 1
 * for a byte that is not part of one; *unsafe is 1 for such a byte and for
 * a character dt_yaml_put_quoted would escape (tab and newline too). */
size_t dt_yaml_char(const char *s, size_t len, int *unsafe);

#endif
