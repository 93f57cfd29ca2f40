/* cmd_export.c - `dtrain export hf`: a gpt2 checkpoint as a Hugging Face
 * model directory.  Its command line and messages only: the files are
 * written by dt_hf_export (worker/hf_weights.c) from a checkpoint read and
 * verified by worker/ckpt.c, as a resume would read it.
 *
 * Not for loading Hugging Face weights (trainer.init_from) or generating
 * text (cmd_sample.c).
 */
#include "launcher/cli/cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "worker/ckpt.h"
#include "worker/hf_weights.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain export hf CHECKPOINT -o DIR [--force]\n\n"
            "Writes a gpt2 checkpoint as a Hugging Face model directory: DIR/model.safetensors (the\n"
            "model's tensors in fp32 under GPT2LMHeadModel's names; no optimizer state, no\n"
            "lm_head.weight, which is tied to transformer.wte.weight as in Hugging Face's own files)\n"
            "and DIR/config.json (a GPT2Config), so that\n"
            "    transformers.GPT2LMHeadModel.from_pretrained(DIR)\n"
            "loads it and gives dtrain's logits.  CHECKPOINT is a step_<N>.safetensors file, a\n"
            "checkpoint directory or a run directory (its newest intact checkpoint); it is verified\n"
            "as a resume verifies it (checksums, format), and its \"model\" metadata says the config.\n\n"
            "Options:\n"
            "  -o, --output DIR  where to write; created if missing; it must be empty unless --force\n"
            "  --force           write into a DIR that holds files: model.safetensors and config.json\n"
            "                    are replaced (each whole, never half-written), the rest left alone\n"
            "  -h, --help        show this help\n\n"
            "Exit status: 0 on success, 1 when the checkpoint cannot be read or is not a gpt2, or DIR\n"
            "cannot be written, 2 on a usage error.\n");
}

static int run(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "hf") != 0)
        return dt_cli_usage_error("export",
                                  argc < 2 ? "needs a format: hf" : "unknown format '%s' (dtrain writes hf)",
                                  argc < 2 ? "" : argv[1]);
    const char *ckpt = NULL, *dir = NULL;
    bool force = false;
    static const struct option own[] = {
        {"output", required_argument, NULL, 'o'}, {"force", no_argument, NULL, 'F'}, {0}};
    static const struct option *const tables[] = {own, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "export", "o:", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc - 1, argv + 1, &v)) != -1;) { /* after the format */
        if (ch == DT_CLI_OPT_ERROR)
            return DT_EXIT_REFUSED;
        if (ch == 'o')
            dir = v;
        else if (ch == 'F')
            force = true;
        else if (!ckpt)
            ckpt = v;
        else
            return dt_cli_usage_error("export", "one checkpoint at a time ('%s' is a second)", v);
    }
    if (!ckpt)
        return dt_cli_usage_error("export", "hf needs a checkpoint file or run directory");
    if (!dir || !*dir)
        return dt_cli_usage_error("export", "hf needs -o DIR, the directory to write");
    struct dt_ckpt_file c;
    int rc = dt_ckpt_read_any(ckpt, &c);
    if (rc == 0)
        rc = dt_hf_export(&c, dir, force);
    if (rc == 0)
        printf("wrote %s/model.safetensors and %s/config.json from %s (step %lld)\n", dir, dir, c.path,
               (long long)c.step);
    else
        fprintf(stderr, "dtrain export: %s\n", dt_error_last());
    dt_ckpt_release(&c);
    return rc ? 1 : 0;
}

const struct dt_cli_command dt_cli_export = {
    .name = "export",
    .summary = "write a gpt2 checkpoint as a Hugging Face model directory",
    .run = run,
    .usage = usage,
};
