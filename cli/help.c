/*
 * The help texts: one entry per command, its synopsis (the block of
 * `graphfuse --help`) and its options (`graphfuse COMMAND --help`), so that
 * the two cannot drift apart.  An option line is "  NAME  explanation" with
 * the explanation at column 35, as in the synopses.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

struct help {
    const char *name;
    const char *synopsis; /* "  NAME ARGS   what it does\n..." */
    const char *options;  /* one line per option, -h included */
};

#define HELP_LINE "  -h, --help                      this help\n"
/* The session's options: run, test and train. */
#define EXEC_OPTIONS \
    "  --backend cpu|cuda|opencl|auto  default $GRAPHFUSE_BACKEND, else auto\n" \
    "  --device NAME                   the device (`graphfuse backends` lists them)\n" \
    "  --threads N                     CPU threads (default: every core)\n" \
    "  --max-memory SIZE               activations + workspace allowed (512K, 64M, 2G)\n" \
    "  --tune-cache FILE               the autotuning cache to read (and --autotune to write)\n" \
    "  --autotune                      tune the kernels the cache lacks before running\n" \
    "  --profile                       print the time per op type and the memory plan\n" \
    "  --no-cuda-graph                 on CUDA, never capture or replay a CUDA Graph\n"

static const struct help helps[] = {
    {"info",
     "  info MODEL                      producer, opsets, inputs/outputs, op histogram,\n"
     "                                  parameters, external-data files\n",
     HELP_LINE},
    {"dump",
     "  dump MODEL [--format text|dot|json] [-o FILE]\n"
     "                                  the graph, one line per node / Graphviz / JSON\n",
     HELP_LINE
     "  -f, --format text|dot|json      one line per node (default) / Graphviz / JSON\n"
     "  -o, --output FILE               write to FILE (atomically) instead of stdout\n"},
    {"optimize",
     "  optimize MODEL -o OUT [--target graphfuse|ort|onnx] [--disable P1,P2]\n"
     "      [--report text|json] [--explain PATTERN] [--drop-output NAME]\n"
     "      [--enable attention] [--precision fp32|tf32|bf16|fp16]\n"
     "                                  cleanup and fusion (patterns below); writes\n"
     "                                  OUT atomically and prints op counts before /\n"
     "                                  after and hits per pattern; --explain tells\n"
     "                                  where PATTERN stopped at each candidate node\n",
     HELP_LINE
     "  -o, --output OUT                the optimized model (written atomically; required)\n"
     "  --target graphfuse|ort|onnx     what the fused ops become in the file\n"
     "  --disable P1,P2                 fusion patterns left out (repeatable)\n"
     "  --enable attention              an opt-in pattern to run too\n"
     "  --report text|json              the format of the report on stdout (default text)\n"
     "  --explain PATTERN               where PATTERN stopped at each candidate node\n"
     "  --drop-output NAME              remove graph output NAME first (repeatable)\n"
     "  --precision fp32|tf32|bf16|fp16\n"
     "                                  autocast's policy, the weights converted\n"},
    {"run",
     "  run MODEL [--input NAME=FILE.pb]... [--random-inputs] [--output-dir DIR]\n"
     "      [--backend cpu|cuda|opencl|auto] [--device NAME] [--threads N] [--profile]\n"
     "      [--max-memory SIZE] [--fuse] [--dim NAME=SIZE (run --random-inputs)]\n"
     "      [--tune-cache FILE] [--autotune] [--repeat N] [--no-cuda-graph]\n"
     "      [--precision fp32|tf32|bf16|fp16]\n"
     "                                  run the graph; outputs summarized and written\n"
     "                                  as output_K.pb into DIR; --fuse optimizes\n"
     "                                  the model in memory first; kernels tuned by\n"
     "                                  `tune` are used, --autotune tunes missing ones;\n"
     "                                  --repeat: N runs (outputs, profile: the last;\n"
     "                                  on CUDA the 2nd captures a CUDA Graph, later\n"
     "                                  ones replay it; --no-cuda-graph: never);\n"
     "                                  --precision: autocast's policy as a pass before\n"
     "                                  fusion (docs/precision.md)\n",
     HELP_LINE
     "  -i, --input NAME=FILE.pb        input NAME from a TensorProto file (repeatable)\n"
     "  --random-inputs                 inputs without a file get reproducible random values\n"
     "  --dim NAME=SIZE                 size of symbolic dim NAME for random inputs (else 1)\n"
     "  --output-dir DIR                write the outputs as DIR/output_K.pb\n"
     "  --fuse                          cleanup and fusion in memory first\n"
     "  --repeat N                      run N times (outputs and profile: the last run's)\n"
     EXEC_OPTIONS
     "  --precision fp32|tf32|bf16|fp16\n"
     "                                  autocast's policy before fusion (default fp32)\n"},
    {"test",
     "  test DIR... [--rtol R] [--atol A] [--by-op] [--fuse] [run options]\n"
     "                                  ONNX backend-test folders (model.onnx +\n"
     "                                  test_data_set_*): PASS / FAIL / UNSUPPORTED\n",
     HELP_LINE
     "  --rtol R                        relative tolerance (default 1e-3)\n"
     "  --atol A                        absolute tolerance (default 1e-7)\n"
     "  --by-op                         a pass / fail / unsupported table per op type\n"
     "  --fuse                          cleanup and fusion in memory first\n"
     EXEC_OPTIONS
     "  --precision fp32|tf32|bf16|fp16\n"
     "                                  autocast's policy before fusion (default fp32)\n"},
    {"plot",
     "  plot LOG.csv -o FILE.png [--title TEXT]\n"
     "                                  the loss curve of a `train --log` file (and the\n"
     "                                  learning rate) as PNG, or SVG for FILE.svg, drawn\n"
     "                                  by gnuplot\n",
     HELP_LINE
     "  -o, --output FILE               the picture: .svg for SVG, else PNG (required)\n"
     "  --title TEXT                    the title (default: the log's name)\n"},
    {"bench",
     "  bench MODEL [--warmup N] [--iterations N | --duration S] [--json] [--fuse]\n"
     "      [--input NAME=FILE.pb]... [--dim NAME=SIZE]... [--backend B] [--device NAME]\n"
     "      [--threads N] [--precision fp32|tf32|bf16|fp16] [--no-cuda-graph]\n"
     "                                  latency (min, mean, p50, p90, p99, max ms) and\n"
     "                                  throughput of runs timed one by one, and the\n"
     "                                  costliest op types of one profiled run\n",
     HELP_LINE
     "  --warmup N                      untimed runs first (default 10)\n"
     "  --iterations N                  timed runs (default 100)\n"
     "  --duration S                    timed runs for S seconds instead of --iterations\n"
     "  --json                          one JSON object instead of the table\n"
     "  -i, --input NAME=FILE.pb        input NAME from a TensorProto file (repeatable)\n"
     "  --random-inputs                 (the default) the other inputs get random values\n"
     "  --dim NAME=SIZE                 size of symbolic dim NAME for random inputs (else 1)\n"
     "  --fuse                          cleanup and fusion in memory first\n"
     "  --backend cpu|cuda|opencl|auto  default $GRAPHFUSE_BACKEND, else auto\n"
     "  --device NAME                   the device (`graphfuse backends` lists them)\n"
     "  --threads N                     CPU threads (default: every core)\n"
     "  --max-memory SIZE               activations + workspace allowed (512K, 64M, 2G)\n"
     "  --tune-cache FILE               the autotuning cache to read (and --autotune to write)\n"
     "  --autotune                      tune the kernels the cache lacks before running\n"
     "  --no-cuda-graph                 on CUDA, never capture or replay a CUDA Graph\n"
     "  --precision fp32|tf32|bf16|fp16\n"
     "                                  autocast's policy before fusion (default fp32)\n"},
    {"compare",
     "  compare A [B] [--backend2 B2] [--device2 D2] [--precision2 P2] [--fuse-vs-unfused]\n"
     "      [--expected DIR] [--rtol R] [--atol A] [run options]\n"
     "                                  run two configurations on the same inputs: per\n"
     "                                  output the worst absolute and relative\n"
     "                                  difference and where; exit 1 when one exceeds\n"
     "                                  the tolerance\n",
     HELP_LINE
     "  B                               a second model, run with the same options as A\n"
     "  --backend2 NAME                 B's backend (default: A's, --backend)\n"
     "  --device2 NAME                  B's device (default: A's, --device)\n"
     "  --precision2 fp32|tf32|bf16|fp16\n"
     "                                  B's precision (default: A's, --precision)\n"
     "  --fuse-vs-unfused               A runs the model as exported, B fused in memory\n"
     "  --fuse                          both fused in memory (e.g. with --backend2)\n"
     "  --expected DIR                  A is the recorded outputs of DIR (ONNX test layout:\n"
     "                                  test_data_set_*/ or input_K.pb + output_K.pb), the\n"
     "                                  inputs too; MODEL defaults to DIR/model.onnx\n"
     "  --rtol R                        relative tolerance (default 1e-3)\n"
     "  --atol A                        absolute tolerance (default 1e-7)\n"
     "  -i, --input NAME=FILE.pb        input NAME from a TensorProto file (repeatable)\n"
     "  --random-inputs                 (the default) the other inputs get random values\n"
     "  --dim NAME=SIZE                 size of symbolic dim NAME for random inputs (else 1)\n"
     "  --backend cpu|cuda|opencl|auto  A's backend: default $GRAPHFUSE_BACKEND, else auto\n"
     "  --device NAME                   A's device (`graphfuse backends` lists them)\n"
     "  --threads N                     CPU threads (default: every core)\n"
     "  --max-memory SIZE               activations + workspace allowed (512K, 64M, 2G)\n"
     "  --tune-cache FILE               the autotuning cache to read (and --autotune to write)\n"
     "  --autotune                      tune the kernels the cache lacks before running\n"
     "  --no-cuda-graph                 on CUDA, never capture or replay a CUDA Graph\n"
     "  --precision fp32|tf32|bf16|fp16\n"
     "                                  A's autocast policy before fusion (default fp32)\n"},
    {"convert",
     "  convert MODEL -o OUT [--external-data] [--external-threshold=BYTES]\n"
     "          [--infer-shapes]        rewrite a model (atomically); with\n"
     "                                  --external-data, initializers of BYTES (1024)\n"
     "                                  or more go to the side file OUT.H.data (H: a\n"
     "                                  hash of its bytes)\n",
     HELP_LINE
     "  -o, --output OUT                the rewritten model (written atomically; required)\n"
     "  --external-data                 large initializers go to the side file OUT.H.data\n"
     "  --external-threshold BYTES      the size from which they do (default 1024)\n"
     "  --infer-shapes                  record the inferred shapes in the file\n"},
    {"train",
     "  train MODEL (--data DIR | --tokens FILE --batch B --seq T) [options]\n"
     "      [--list-params] [--untie NAME[,NAME...]|all] [--disable P1,P2] [--precision bf16]\n"
     "      [-o OUT.onnx] [--save-safetensors FILE] [--checkpoint FILE] [--resume CKPT]\n"
     "                                  train (SGD / AdamW; every option: `graphfuse\n"
     "                                  train --help`); --list-params: which\n"
     "                                  initializers are trained (no data needed);\n"
     "                                  --untie: parameters the exporter merged, trained\n"
     "                                  apart; --disable: fusion patterns left out;\n"
     "                                  Ctrl-C saves and exits 130\n",
     HELP_LINE
     "  --data DIR                      batches: ONNX test-layout folder(s) of input_K.pb\n"
     "  --tokens FILE                   batches: a flat file of uint16/uint32 token ids\n"
     "  --batch B                       rows per micro-batch (with --tokens)\n"
     "  --seq T                         tokens per row (with --tokens)\n"
     "  --token-bytes 2|4               width of a token id in FILE (default from the vocabulary)\n"
     "  --seed S                        seed of the token windows (default 0)\n"
     "  --steps N                       total steps, a resumed run's included (default 100)\n"
     "  --optimizer sgd|adamw           torch.optim.SGD (default) or AdamW\n"
     "  --lr LR                         peak learning rate (default 1e-3)\n"
     "  --momentum M                    SGD momentum (default 0)\n"
     "  --dampening D                   SGD dampening (default 0)\n"
     "  --nesterov                      SGD Nesterov momentum\n"
     "  --beta1 B1                      AdamW beta1 (default 0.9)\n"
     "  --beta2 B2                      AdamW beta2 (default 0.999)\n"
     "  --eps E                         AdamW epsilon (default 1e-8)\n"
     "  --weight-decay WD               weight decay (default 0 for SGD, 0.01 for AdamW)\n"
     "  --clip-grad-norm C              clip the global gradient norm to C\n"
     "  --schedule constant|cosine      learning-rate schedule after warmup (default constant)\n"
     "  --warmup W                      linear warmup steps (default 0)\n"
     "  --min-lr LR                     the floor of the cosine schedule (default 0)\n"
     "  --accumulate K                  micro-batches per step, gradients averaged (default 1)\n"
     "  --loss NAME                     the output to minimize\n"
     "  --trainable REGEX               train only the initializers REGEX matches\n"
     "  --freeze REGEX                  keep the initializers REGEX matches constant\n"
     "  --untie NAME[,NAME...]|all      parameters the exporter merged, trained apart\n"
     "  --no-tie                        do not tie a parameter to its copies\n"
     "  --fuse, --no-fuse               fused forward and backward (default), or as exported\n"
     "  --disable P1,P2                 fusion patterns left out of the trained graph\n"
     "  --list-params                   print which initializers are trained, and exit\n"
     "  --plot FILE.png                 the loss curve (and the learning rate) at the end,\n"
     "                                  drawn by gnuplot (.svg: SVG); see `graphfuse plot`\n"
     "  --dump-graph FILE               write the training graph (fused forward, backward) as\n"
     "                                  text, or .dot / .json by FILE's extension\n"
     "  -o, --output OUT.onnx           the model with the trained weights, at the end\n"
     "  --save-safetensors FILE         the trained parameters by PyTorch name, at the end\n"
     "  --checkpoint-every K            write a checkpoint every K steps\n"
     "  --checkpoint FILE               the checkpoint file (default OUT.ckpt.onnx beside -o)\n"
     "  --resume CKPT                   continue from a checkpoint of the same model and options\n"
     "  --log FILE.csv                  one row per step: step,loss,grad_norm,lr,ms,tokens_per_s\n"
     EXEC_OPTIONS
     "  --precision fp32|tf32|bf16|fp16\n"
     "                                  the trainer's copy in that type, fp32 master weights\n"
     "  --loss-scale S                  fp16: the initial loss scale (default 65536)\n"
     "  --loss-scale-window N           fp16: good steps before the scale doubles (2000)\n"},
    {"export-weights",
     "  export-weights MODEL|CHECKPOINT -o FILE.safetensors [--list]\n"
     "                                  the parameters by PyTorch name and layout\n"
     "                                  (load_state_dict takes the file)\n",
     HELP_LINE
     "  -o, --output FILE.safetensors   the parameters by PyTorch name (required)\n"
     "  --list                          list every parameter and every name left out\n"},
    {"generate",
     "  generate MODEL [--chars S] [-n N] [--seed S]   sample words from a character model\n",
     HELP_LINE
     "  --chars S                       token k's character is the k-th (\\n: the separator)\n"
     "  -n N                            number of words (default 10)\n"
     "  --seed S                        seed of the sampling (default 1)\n"
     "  --temperature T                 softmax temperature (default 1)\n"
     "  --max-len L                     letters per word at most (default 24)\n"},
    {"backends",
     "  backends                        the backends built in, their devices, and the\n"
     "                                  one --backend auto picks\n",
     HELP_LINE},
    {"tune",
     "  tune MODEL [--backend B] [--device NAME] [--dim NAME=SIZE]... [--tune-cache FILE]\n"
     "      [--input NAME=FILE.pb]... [--tune-budget N] [--repeats N] [--force] [--fuse]\n"
     "      [--with-cpu]                time kernels and knob values per node of the plan\n"
     "                                  run makes for these inputs (random, else the\n"
     "                                  files); cache the fastest correct ones (run\n"
     "                                  uses the cache)\n",
     HELP_LINE
     "  --backend B                     the backend to tune (cpu, cuda, opencl, auto)\n"
     "  --device NAME                   the device of the backend\n"
     "  --dim NAME=SIZE                 size of symbolic dim NAME (every symbolic dim needs one)\n"
     "  -i, --input NAME=FILE.pb        input NAME from a file instead of random values\n"
     "  --tune-cache FILE               the cache to read and write\n"
     "  --tune-budget N                 configs tried per node, defaults included (default 64)\n"
     "  --repeats N                     timed samples per config, the median counts (default 7)\n"
     "  --force                         tune again the nodes the cache has\n"
     "  --fuse                          cleanup and fusion in memory first, as run --fuse\n"
     "  --with-cpu                      let the CPU kernels compete too\n"},
};

static const char head[] = "usage: graphfuse COMMAND [ARGS]\n"
    "\n"
    "commands:\n";
static const char tail[] = "\n"
    "options:\n"
    "  -h, --help                      this help\n"
    "  -V, --version                   print the version\n"
    "\n"
    "exit codes: 0 success, 1 a failed check, 2 bad usage or bad input,\n"
    "            3 unsupported feature, 4 internal error, 130 train interrupted\n";

void cli_print_usage(FILE *f)
{
    fputs(head, f);
    for (size_t i = 0; i < sizeof(helps) / sizeof(helps[0]); i++)
        fputs(helps[i].synopsis, f);
    fputs(tail, f);
}

/* The synopsis after "usage: graphfuse ": its first line's explanation
 * (after a run of spaces) moves to a line of its own, at its column. */
static void print_synopsis(const char *s)
{
    const char *nl = strchr(s, '\n'), *gap = strstr(s + 2, "   ");
    if (!gap || gap > nl) {
        printf("usage: graphfuse %s", s + 2);
        return;
    }
    const char *text = gap;
    while (*text == ' ')
        text++;
    printf("usage: graphfuse %.*s\n%*s%s", (int)(gap - s - 2), s + 2, (int)(text - s), "",
           text);
}

bool cli_print_command_help(const char *cmd)
{
    for (size_t i = 0; i < sizeof(helps) / sizeof(helps[0]); i++)
        if (strcmp(helps[i].name, cmd) == 0) {
            print_synopsis(helps[i].synopsis);
            printf("\noptions:\n%s", helps[i].options);
            return true;
        }
    return false;
}
