/* test_sampler.c - MT19937, torch.randperm and DistributedSampler against
 * PyTorch's own index lists (tests/fixtures/sampler.safetensors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "worker/data/sampler.h"
#include "fixture.h"

static void mt19937_matches_std(void **state)
{
    (void)state;
    /* C++11 [rand.predef]: the 10000th output of a default-seeded mt19937 is 4123659995. */
    struct dt_mt19937 g;
    dt_mt19937_seed(&g, 5489u);
    uint32_t x = 0;
    for (int i = 0; i < 10000; i++)
        x = dt_mt19937_next(&g);
    assert_int_equal(x, 4123659995u);
}

static void randperm_matches_reference(void **state)
{
    (void)state;
    /* torch.randperm(60000, generator=torch.Generator().manual_seed(0)): rank 0 of 8
     * (every 8th from 0) starts 36044, 26145, 4072, 29120, 3731. */
    int64_t *p = malloc(60000 * sizeof *p);
    struct dt_mt19937 g;
    dt_mt19937_seed(&g, 0);
    dt_sampler_randperm(&g, 60000, p);
    const int64_t want[5] = {36044, 26145, 4072, 29120, 3731};
    for (int i = 0; i < 5; i++)
        assert_int_equal(p[8 * i], want[i]);
    free(p);
}

/* key: n<N>.r<R>.s<shuffle>.d<drop>.e<epoch>.seed<seed>.rank<rank> */
static void check_case(const struct dt_safetensors *f, const char *key)
{
    long long n, seed;
    int r, sh, dr, ep, rank;
    if (sscanf(key, "n%lld.r%d.s%d.d%d.e%d.seed%lld.rank%d", &n, &r, &sh, &dr, &ep, &seed, &rank) != 7)
        fail_msg("bad fixture key %s", key);
    const struct dt_st_tensor *t = fixture_tensor(f, key, "I32");
    struct dt_sampler s;
    assert_int_equal(dt_sampler_init(&s, n, rank, r, sh, dr, (uint64_t)seed), 0);
    if ((size_t)s.num_samples != fixture_numel(t))
        fail_msg("%s: num_samples %lld, torch %zu", key, (long long)s.num_samples, fixture_numel(t));
    int64_t *idx = malloc((size_t)(s.num_samples + 1) * sizeof *idx);
    dt_sampler_epoch(&s, ep, idx);
    const int32_t *want = t->data;
    for (int64_t i = 0; i < s.num_samples; i++)
        if (idx[i] != want[i])
            fail_msg("%s: index %lld is %lld, torch %d", key, (long long)i, (long long)idx[i], want[i]);
    free(idx);
    dt_sampler_release(&s);
}

static void sampler_matches_torch(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("sampler.safetensors", &f);
    const char *cases = dt_safetensors_meta(&f, "cases");
    assert_non_null(cases);
    char *list = strdup(cases), *save = NULL;
    int n = 0;
    for (char *k = strtok_r(list, ",", &save); k; k = strtok_r(NULL, ",", &save), n++)
        check_case(&f, k);
    assert_true(n >= 50);
    free(list);
    dt_safetensors_release(&f);
}

static void bad_rank_is_an_error(void **state)
{
    (void)state;
    struct dt_sampler s;
    assert_int_equal(dt_sampler_init(&s, 10, 3, 3, true, false, 0), DT_EINVAL);
    assert_string_equal(dt_error_last(), "Invalid rank 3, rank should be in the interval [0, 2]");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mt19937_matches_std),
        cmocka_unit_test(randperm_matches_reference),
        cmocka_unit_test(sampler_matches_torch),
        cmocka_unit_test(bad_rank_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
