/*
 * fuzz_tune_cache: bytes -> an autotune cache file (YAML) opened by
 * gf_tuner_open, the way `--tune-cache FILE` does; damage is a warning.
 */
#include <string.h>

#include "fuzz_util.h"
#include "gf_tune.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_temp_path("yaml");
    if (!fz_write(path, data, size))
        return 0;
    struct gf_tuner *t;
    if (gf_tuner_open(path, &t) != GF_OK)
        return 0;
    volatile size_t n = 0;
    for (size_t i = 0; i < gf_tuner_warning_count(t); i++)
        n += strlen(gf_tuner_warning(t, i));
    (void)n;
    gf_tuner_free(t);
    return 0;
}
