/* gen_schema.c - configs/job.schema.json (JSON Schema 2020-12) from the key tables.
 *
 * Each key's schema follows from its type and range (an integer's minimum
 * and maximum, an enum's words, a string's minLength 1 unless "" is allowed,
 * every mapping closed with additionalProperties false, required keys), with
 * the key's help as description and its default as default; what a type
 * cannot say (patterns, the forms a custom key takes, rules between keys)
 * the table adds as JSON members (`schema`), laid over the generated ones.
 * The formats every key of a type shares (durations, sizes) are $defs here.
 *
 * Not for validating: the parser is the judge; tests/integration/
 * test_validate_schema.sh checks the two agree on the specs in configs/.
 */
#include "spec/gen/specgen.h"

#include "base/error.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SIZE_PATTERN "^[0-9]+(\\.[0-9]+)? ?([KkMGT]B?|[KkMGT]iB?|B)?$"

/* The formats of the value types, referred to as #/$defs/<name>. */
static json_t *defs(void)
{
    return json_pack(
        "{s:{s:s, s:[s,s,s]}, s:{s:s, s:s, s:s}, s:{s:s, s:[{s:s, s:i}, {s:s, s:s}]}, s:{s:s, s:[{s:s, s:i},"
        " {s:s, s:s}]}}",
        "text", "description", "A value taken as written (numbers and booleans become their text).", "type",
        "string", "number", "boolean", "duration", "type", "string", "pattern",
        "^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$", "description", "A duration like 30s, 10m, 500ms or 1h30m.",
        "size", "description",
        "A size: a number of MiB, or 25MB, 512KiB, 1GiB (K/M/G/T powers of 1000, Ki/Mi/Gi/Ti of 1024).",
        "anyOf", "type", "number", "exclusiveMinimum", 0, "type", "string", "pattern", SIZE_PATTERN, "bytes",
        "description",
        "A byte count, or a size like 64Gi, 512MB (K/M/G/T powers of 1000, Ki/Mi/Gi/Ti of 1024).", "anyOf",
        "type", "integer", "minimum", 1, "type", "string", "pattern", SIZE_PATTERN);
}

/* An integral bound as a JSON integer (65536, not 65536.0). */
static json_t *num(double x)
{
    return x == floor(x) && fabs(x) < 9.3e18 ? json_integer((json_int_t)x) : json_real(x);
}

static void set_range(json_t *o, const struct dt_spec_key *k)
{
    if (k->flags & DT_KF_LO)
        json_object_set_new(o, k->flags & DT_KF_LO_X ? "exclusiveMinimum" : "minimum", num(k->lo));
    if (k->flags & DT_KF_HI)
        json_object_set_new(o, k->flags & DT_KF_HI_X ? "exclusiveMaximum" : "maximum", num(k->hi));
}

static json_t *ref(const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "#/$defs/%s", name);
    return json_pack("{s:s}", "$ref", path);
}

static json_t *words(const char *const *names)
{
    json_t *a = json_array();
    for (int i = 0; names[i]; i++)
        json_array_append_new(a, json_string(names[i]));
    return a;
}

/* A default's text as JSON: the YAML reader's tree with plain numbers and booleans typed. */
static json_t *yaml_json(const struct dt_ynode *n)
{
    if (n->kind == DT_Y_SEQ) {
        json_t *a = json_array();
        for (size_t i = 0; i < n->n; i++)
            json_array_append_new(a, yaml_json(n->items[i]));
        return a;
    }
    if (n->kind == DT_Y_MAP) {
        json_t *o = json_object();
        for (size_t i = 0; i < n->n; i++)
            json_object_set_new(o, dt_ymap_key(n, i)->text, yaml_json(dt_ymap_val(n, i)));
        return o;
    }
    long long i;
    double x;
    if (n->plain && dt_spec_parse_int(n->text, &i) == 0)
        return json_integer(i);
    if (n->plain && dt_spec_parse_num(n->text, &x) == 0)
        return num(x);
    if (n->plain && (!strcmp(n->text, "true") || !strcmp(n->text, "false")))
        return json_boolean(n->text[0] == 't');
    return json_string(n->text);
}

static int set_default(json_t *o, const struct dt_spec_key *k)
{
    struct dt_ynode *tree;
    if (!k->def)
        return 0;
    if (dt_yaml_parse(k->def, strlen(k->def), k->name, &tree))
        return dt_error_code();
    json_object_set_new(o, "default", yaml_json(tree));
    dt_yaml_free(tree);
    return 0;
}

/* The table's JSON members over the generated ones; a null member removes one. */
static int overlay(json_t *o, const char *schema, const char *name)
{
    if (!schema)
        return 0;
    json_error_t err;
    json_t *extra = json_loads(schema, 0, &err);
    if (!extra || !json_is_object(extra)) {
        json_decref(extra);
        return dt_error_set(DT_EINVAL, "specgen: the schema text of '%s' is not a JSON object: %s", name,
                            err.text);
    }
    const char *key;
    json_t *v;
    json_object_foreach (extra, key, v) {
        if (json_is_null(v))
            json_object_del(o, key);
        else
            json_object_set(o, key, v);
    }
    json_decref(extra);
    return 0;
}

static json_t *section_schema(const struct dt_spec_section *sec, const char *help, int *rc);

/* {member: value, "description": help}: the member that says the value's kind first. */
static json_t *head(const char *member, json_t *value, const struct dt_spec_key *k)
{
    json_t *o = json_object();
    if (member)
        json_object_set_new(o, member, value);
    json_object_set_new(o, "description", json_string(k->help));
    return o;
}

static json_t *scalar_base(const struct dt_spec_key *k)
{
    static const char *const defs_of[] = {[DT_KT_DURATION] = "#/$defs/duration",
                                          [DT_KT_SIZE_MB] = "#/$defs/size",
                                          [DT_KT_BYTES] = "#/$defs/bytes"};
    json_t *o;
    if (k->names)
        return head("enum", words(k->names), k);
    switch (k->type) {
    case DT_KT_STR:
    case DT_KT_CHARS:
        o = head("type", json_string("string"), k);
        if (!(k->flags & DT_KF_EMPTY_OK))
            json_object_set_new(o, "minLength", json_integer(1));
        return o;
    case DT_KT_INT:
    case DT_KT_I64:
    case DT_KT_U64:
    case DT_KT_NUM:
        o = head("type", json_string(k->type == DT_KT_NUM ? "number" : "integer"), k);
        set_range(o, k);
        return o;
    case DT_KT_BOOL:
        return head("type", json_string("boolean"), k);
    case DT_KT_DURATION:
    case DT_KT_SIZE_MB:
    case DT_KT_BYTES:
        return head("$ref", json_string(defs_of[k->type]), k);
    default: /* DT_KT_CUSTOM: its table entry says all (schema) */
        return head(NULL, NULL, k);
    }
}

/* The schema of a key before its table extras: kind, description, constraints. */
static json_t *key_base(const struct dt_spec_key *k, int *rc)
{
    json_t *o;
    switch (k->type) {
    case DT_KT_STRLIST:
        o = head("type", json_string("array"), k);
        json_object_set_new(o, "items", ref("text"));
        if (k->flags & DT_KF_LO)
            json_object_set_new(o, "minItems", num(k->lo));
        return o;
    case DT_KT_STRMAP:
        o = head("type", json_string("object"), k);
        json_object_set_new(o, "additionalProperties", ref("text"));
        if (k->flags & DT_KF_ENVNAME)
            json_object_set_new(o, "propertyNames",
                                json_pack("{s:s}", "pattern", "^[A-Za-z_][A-Za-z0-9_]*$"));
        return o;
    case DT_KT_SECTION:
    case DT_KT_SECTION_PTR:
        return section_schema(k->sub, k->help, rc);
    case DT_KT_SECLIST:
        o = head("type", json_string("array"), k);
        json_object_set_new(o, "items", section_schema(k->sub, k->sub->help, rc));
        return o;
    case DT_KT_YAML:
        return head("type", json_string("object"), k);
    default:
        return scalar_base(k);
    }
}

static json_t *key_schema(const struct dt_spec_key *k, int *rc)
{
    json_t *o = key_base(k, rc);
    int r = overlay(o, k->schema, k->name);
    r = r ? r : set_default(o, k);
    if (r && !*rc)
        *rc = r;
    return o;
}

/* A mapping of the section's keys, closed to others, with its required keys and table extras. */
static json_t *section_schema(const struct dt_spec_section *sec, const char *help, int *rc)
{
    json_t *o = json_object(), *props = json_object(), *req = json_array();
    json_object_set_new(o, "type", json_string("object"));
    if (help)
        json_object_set_new(o, "description", json_string(help));
    json_object_set_new(o, "additionalProperties", json_false());
    for (size_t i = 0; i < sec->n_keys; i++) {
        json_object_set_new(props, sec->keys[i].name, key_schema(&sec->keys[i], rc));
        if (sec->keys[i].flags & DT_KF_REQUIRED)
            json_array_append_new(req, json_string(sec->keys[i].name));
    }
    if (json_array_size(req))
        json_object_set(o, "required", req);
    json_decref(req);
    json_object_set_new(o, "properties", props);
    int r = overlay(o, sec->schema, sec->title ? sec->title : "a section");
    if (r && !*rc)
        *rc = r;
    return o;
}

int dt_gen_schema(FILE *out)
{
    int rc = 0;
    json_t *root = json_pack("{s:s, s:s}", "$schema", "https://json-schema.org/draft/2020-12/schema", "title",
                             "dtrain job spec");
    json_t *body = section_schema(&dt_jobspec_root, dt_jobspec_root.help, &rc);
    json_object_update(root, body);
    json_decref(body);
    json_object_set_new(root, "$defs", defs());
    if (rc == 0 &&
        (json_dumpf(root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) || fputc('\n', out) == EOF))
        rc = dt_error_set(DT_EIO, "specgen: cannot write the schema");
    json_decref(root);
    return rc;
}
