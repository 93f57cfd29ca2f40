/* test_hostlist.c - the Slurm hostlist parser: a wide table of forms with their exact
 * expansion (brackets, zero padding, suffixes, several groups, several items, the
 * forms Slurm itself prints), large ranges counted without being listed, and a
 * table of malformed lists, each with the column and a distinctive part of the
 * message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "scheduler-adapters/hostlist.h"

struct good_case {
    const char *expr;
    const char *hosts; /* the expansion, space-separated */
};

static const struct good_case good_cases[] = {
    {"n1", "n1"},
    {"localhost", "localhost"},
    {"node-7.cluster.example.org", "node-7.cluster.example.org"},
    {"a,b,c", "a b c"},
    {"n[1-2]", "n1 n2"},
    {"n[1]", "n1"},
    {"n[0]", "n0"},
    {"node[01-04,07]", "node01 node02 node03 node04 node07"},
    {"node[1-3,5,7-8]", "node1 node2 node3 node5 node7 node8"},
    {"node[8-10]", "node8 node9 node10"},
    {"node[08-10]", "node08 node09 node10"},
    {"node[008-010]", "node008 node009 node010"},
    {"node[098-101]", "node098 node099 node100 node101"},
    {"node[99-101]", "node99 node100 node101"},
    {"node[0000-0002]", "node0000 node0001 node0002"},
    {"node[1,01,001]", "node1 node01 node001"},
    {"node[5,3,4]", "node5 node3 node4"}, /* Slurm's order is kept, not sorted */
    {"[1-3]", "1 2 3"},
    {"[07-09]x", "07x 08x 09x"},
    {"gpu[1-2]-ib", "gpu1-ib gpu2-ib"},
    {"gpu[1-2]-ib0.fabric", "gpu1-ib0.fabric gpu2-ib0.fabric"},
    {"rack[0-1]_blade[0-1]", "rack0_blade0 rack0_blade1 rack1_blade0 rack1_blade1"},
    {"r[1-2]c[01,03]n[7]", "r1c01n7 r1c03n7 r2c01n7 r2c03n7"},
    {"a[1-2],b,c[008-010]", "a1 a2 b c008 c009 c010"},
    {"n[1-2],n[5-6]", "n1 n2 n5 n6"},
    {"x[1-2],y[3,5-6],z", "x1 x2 y3 y5 y6 z"},
    {"n1,n[3-4],m[01-02]-ib,k", "n1 n3 n4 m01-ib m02-ib k"},
    {"node1-[1-2]", "node1-1 node1-2"},
    {"n[2-2]", "n2"},
    {"n[1,1]", "n1 n1"},
    {"n[9-11]a[1-2]", "n9a1 n9a2 n10a1 n10a2 n11a1 n11a2"},
    {"UPPER[1-2]", "UPPER1 UPPER2"},
    {"a.b_c-d[1-1]", "a.b_c-d1"},
    {"n[000000000000000001-000000000000000002]", "n000000000000000001 n000000000000000002"},
};

static void expands_every_form(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof good_cases / sizeof good_cases[0]; i++) {
        struct dt_hostlist hl;
        int rc = dt_hostlist_expand(good_cases[i].expr, &hl);
        if (rc != 0)
            fail_msg("%s: %s", good_cases[i].expr, dt_error_last());
        char got[1024] = "";
        for (int k = 0; k < hl.n; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", k ? " " : "", hl.hosts[k]);
        if (strcmp(got, good_cases[i].hosts) != 0)
            fail_msg("%s: expanded to \"%s\", expected \"%s\"", good_cases[i].expr, got, good_cases[i].hosts);
        dt_hostlist_free(&hl);
        assert_null(hl.hosts);
        assert_int_equal(hl.n, 0);
    }
}

static void large_ranges(void **state)
{
    (void)state;
    struct dt_hostlist hl;
    assert_int_equal(dt_hostlist_expand("node[0000-4095]", &hl), 0);
    assert_int_equal(hl.n, 4096);
    assert_string_equal(hl.hosts[0], "node0000");
    assert_string_equal(hl.hosts[1000], "node1000");
    assert_string_equal(hl.hosts[4095], "node4095");
    dt_hostlist_free(&hl);
    /* 256 x 256 = the limit exactly */
    assert_int_equal(dt_hostlist_expand("r[0-255]n[0-255]", &hl), 0);
    assert_int_equal(hl.n, DT_HOSTLIST_MAX_HOSTS);
    assert_string_equal(hl.hosts[hl.n - 1], "r255n255");
    assert_string_equal(hl.hosts[256], "r1n0");
    dt_hostlist_free(&hl);
}

static void nth_host(void **state)
{
    (void)state;
    char h[64];
    assert_int_equal(dt_hostlist_nth("n[1-2],gpu[07-09]", 0, h, sizeof h), 0);
    assert_string_equal(h, "n1");
    assert_int_equal(dt_hostlist_nth("n[1-2],gpu[07-09]", 3, h, sizeof h), 0);
    assert_string_equal(h, "gpu08");
    assert_int_equal(dt_hostlist_nth("n[1-2]", 2, h, sizeof h), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "has 2 hosts; there is no host number 2"));
    assert_int_equal(dt_hostlist_nth("averyveryverylongname", 0, h, 8), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "longer than 7 characters"));
    assert_int_equal(dt_hostlist_nth("n[", 0, h, sizeof h), DT_EINVAL);
}

struct bad_case {
    const char *expr;
    int col; /* 0: no column in the message */
    const char *needle;
};

static const struct bad_case bad_cases[] = {
    {"", 0, "hostlist is empty"},
    {"node[1-2", 5, "this '[' is never closed"},
    {"node[", 5, "this '[' is never closed"},
    {"node[1,", 5, "this '[' is never closed"},
    {"node[1-", 8, "expected a number inside the brackets, found the end"},
    {"node1-2]", 8, "']' without a matching '['"},
    {"node[]", 6, "empty brackets"},
    {"node[5-3]", 6, "range runs backwards"},
    {"node[a-b]", 6, "expected a number inside the brackets, found 'a'"},
    {"node[1-b]", 8, "found 'b'"},
    {"node[1-2-3]", 9, "expected ',', '-' or ']' after a number, found '-'"},
    {"node[1,,2]", 8, "empty element between commas"},
    {"node[1,]", 8, "empty element between commas"},
    {"node[,1]", 6, "expected a number inside the brackets, found ','"},
    {"node[1[2]]", 7, "brackets cannot nest"},
    {"node[[1]]", 6, "found '['"},
    {"node[ 1]", 6, "found a space"},
    {"node[-1]", 6, "found '-'"},
    {"a,,b", 3, "empty host name"},
    {",a", 1, "empty host name"},
    {"a,", 2, "empty host name"},
    {",", 1, "empty host name"},
    {"a b", 2, "a space cannot be part of a host name"},
    {"a\tb", 2, "0x09 cannot be part of a host name"},
    {"n@1", 2, "'@' cannot be part of a host name"},
    {"n[1-2]x]", 8, "']' without a matching '['"},
    {"n[0-70000]", 0, "more than 65536 hosts"},
    {"a[0-255]b[0-256]", 0, "more than 65536 hosts"},
    {"a[0-40000],b[0-40000]", 0, "more than 65536 hosts"},
    {"n[0-99999999999999999999]", 5, "more than 18 digits"},
    {"a[1][2][3][4][5][6][7][8][9]", 26, "more than 8 bracket groups"},
};

static void malformed_lists_name_the_column(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        struct dt_hostlist hl = {.n = 42};
        int rc = dt_hostlist_expand(bad_cases[i].expr, &hl);
        if (rc != DT_EINVAL)
            fail_msg("\"%s\": expected an error, got %d", bad_cases[i].expr, rc);
        assert_int_equal(hl.n, 0);
        assert_null(hl.hosts);
        const char *msg = dt_error_last();
        if (!strstr(msg, bad_cases[i].needle))
            fail_msg("\"%s\": message \"%s\" lacks \"%s\"", bad_cases[i].expr, msg, bad_cases[i].needle);
        char col[32];
        snprintf(col, sizeof col, ": column %d: ", bad_cases[i].col);
        if (bad_cases[i].col && !strstr(msg, col))
            fail_msg("\"%s\": message \"%s\" lacks \"%s\"", bad_cases[i].expr, msg, col);
    }
    assert_int_equal(dt_hostlist_expand(NULL, &(struct dt_hostlist){0}), DT_EINVAL);
}

static void messages_quote_the_list(void **state)
{
    (void)state;
    struct dt_hostlist hl;
    dt_hostlist_expand("node[01-04,07", &hl);
    assert_string_equal(dt_error_last(), "hostlist \"node[01-04,07\": column 5: this '[' is never closed");
    char name[300];
    memset(name, 'a', 256);
    name[256] = 0;
    assert_int_equal(dt_hostlist_expand(name, &hl), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "longer than 255 characters"));
    memset(name, 'a', 250);
    strcpy(name + 250, "[1-100000]");
    assert_int_equal(dt_hostlist_expand(name, &hl), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "\"...: ")); /* a long list is cut in the message */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(expands_every_form),
        cmocka_unit_test(large_ranges),
        cmocka_unit_test(nth_host),
        cmocka_unit_test(malformed_lists_name_the_column),
        cmocka_unit_test(messages_quote_the_list),
    };
    return cmocka_run_group_tests_name("hostlist", tests, NULL, NULL);
}
