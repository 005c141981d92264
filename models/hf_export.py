#!/usr/bin/env python3
"""Export real Hugging Face transformers models to ONNX and record PyTorch references.

    python3 models/hf_export.py

A sibling of models/export.py: where export.py writes hand-written look-alikes,
this script uses the transformers model classes themselves (random weights
from a seed, nothing downloaded), exported the way a user would:
LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, GemmaForCausalLM,
Phi3ForCausalLM, GPT2LMHeadModel, BertForMaskedLM, all tiny (hidden 64,
2 layers, vocabulary 256, 4 heads with 2 key/value heads where the
architecture has GQA, intermediate 64, 64 positions).

For each architecture this script

  1. writes the config (config.json, `config.to_json_file`) and build.json
     (seed, model class, attention implementation), rebuilds the model from
     that file and a fixed seed, and rounds every floating parameter to a
     bfloat16-representable fp32 value (the committed files compress);
  2. exports it with the TorchScript-based exporter (torch.onnx.export(...,
     dynamo=False), opset 17, dynamic batch / sequence axes) and with the dynamo
     exporter (torch.onnx.export(..., dynamo=True), its defaults: static
     shapes), each without labels (input_ids, attention_mask -> logits) and with
     labels (input_ids, attention_mask, labels -> loss, logits);
  3. writes the ONNX backend-test layout next to each model.onnx
     (test_data_set_0/input_<i>.pb, output_<i>.pb; outputs are PyTorch eager);
  4. checks the file with onnxruntime against eager (rtol 1e-5 / atol 1e-6,
     ORT graph optimizations off and on; the legacy files also on two other
     input shapes) and fails loudly on a mismatch;
  5. records every initializer and the PyTorch parameter(s) or buffer it holds
     (initializers.txt; merged equal initializers and tied weights list all
     their torch names joined by '='), and the op histogram (ops.txt);
  6. records training references: 5 steps of SGD and of AdamW on the batch of
     the -labels test data (train_sgd.csv, train_adamw.csv);
  7. rewrites models/hf/README.md.

Deterministic (fixed seeds, one thread, deterministic algorithms) and
idempotent: it deletes and rewrites models/hf/.  Nothing else in the
repository is touched; the C tests read the files and never run this script.
"""

import ast
import collections
import io
import json
import math
import os
import platform
import shutil
import site
import sys
import sysconfig
import warnings

import numpy as np
import torch

import onnx
import onnx.numpy_helper
import onnxruntime
import onnxscript
import transformers
from transformers import (BertConfig, BertForMaskedLM, GemmaConfig, GemmaForCausalLM,
                          GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "hf")
REPO = os.path.dirname(HERE)

RTOL = 1e-5
ATOL = 1e-6
LEGACY_OPSET = 17
IGNORE_INDEX = -100

BATCH, SEQ = 2, 16            # the recorded test data
PAD_LAST_ROW = 3              # row 1 ends with 3 padding positions (attention_mask 0)
TRAIN_STEPS = 5
SGD_HP = dict(lr=0.1, momentum=0.9)
ADAMW_HP = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

# --------------------------------------------------------------------------
# Architectures.  Sizes as the brief of this corpus: hidden 64, 2 layers,
# vocabulary 256, 4 heads (2 key/value heads where the architecture has GQA),
# intermediate 64, 64 positions; every dropout probability 0 (so eval() and
# train() compute the same function); use_cache False for the causal LMs.
# Token ids that transformers' defaults put outside a 256-entry vocabulary
# (Phi-3's 32000, GPT-2's 50256) are moved inside it.
# --------------------------------------------------------------------------

# intermediate 64 rather than 128 keeps models/hf/ under the 6 MB budget
# (tar czf: 6.8 MB with 128)
INTERMEDIATE = 64

DECODER = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, intermediate_size=INTERMEDIATE, max_position_embeddings=64,
               use_cache=False, attention_dropout=0.0)

ARCHS = collections.OrderedDict([
    ("llama", dict(task="causal", seed=1001, config=LlamaConfig, model=LlamaForCausalLM,
                   kwargs=dict(DECODER, head_dim=16))),
    ("qwen2", dict(task="causal", seed=1002, config=Qwen2Config, model=Qwen2ForCausalLM,
                   kwargs=dict(DECODER))),
    ("mistral", dict(task="causal", seed=1003, config=MistralConfig, model=MistralForCausalLM,
                     kwargs=dict(DECODER, head_dim=16))),
    # Gemma's default head_dim is 256 whatever the hidden size: set to 64 / 4
    ("gemma", dict(task="causal", seed=1004, config=GemmaConfig, model=GemmaForCausalLM,
                   kwargs=dict(DECODER, head_dim=16))),
    # Phi-3's defaults are pad = eos = 32000: bos 1, eos 2, pad 0 here
    ("phi3", dict(task="causal", seed=1005, config=Phi3Config, model=Phi3ForCausalLM,
                  kwargs=dict(DECODER, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=1,
                              eos_token_id=2, pad_token_id=0))),
    # GPT-2 has no GQA (n_head only); bos = eos = 50256 by default: 255 here
    ("gpt2", dict(task="causal", seed=1006, config=GPT2Config, model=GPT2LMHeadModel,
                  kwargs=dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_inner=INTERMEDIATE,
                              n_positions=64, use_cache=False, resid_pdrop=0.0,
                              embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
                              bos_token_id=255, eos_token_id=255))),
    ("bert", dict(task="mlm", seed=1007, config=BertConfig, model=BertForMaskedLM,
                  kwargs=dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=INTERMEDIATE,
                              max_position_embeddings=64, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0))),
])

# attn_implementation per architecture when the default fails to export
# (none needed with the versions in README.md; see ATTN_NOTES)
FORCE_EAGER = {}
ATTN_NOTES = {}

MASK_ID = 103                 # BERT's [MASK] id in bert-base-uncased, inside our vocab
EXPORTS = ["legacy", "dynamo", "legacy-labels", "dynamo-labels"]


def pad_id(cfg):
    return cfg.pad_token_id if cfg.pad_token_id is not None else 0


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------

def write_config(arch):
    """config.json + build.json of arch; returns the config read back."""
    spec = ARCHS[arch]
    folder = os.path.join(OUT, arch)
    os.makedirs(folder, exist_ok=True)
    cfg = spec["config"](**spec["kwargs"])
    path = os.path.join(folder, "config.json")
    cfg.to_json_file(path)
    with open(os.path.join(folder, "build.json"), "w") as f:
        json.dump(build_info(arch), f, indent=2)
        f.write("\n")
    return spec["config"].from_json_file(path)


def build_info(arch):
    spec = ARCHS[arch]
    return {
        "model_class": spec["model"].__name__,
        "config_class": spec["config"].__name__,
        "seed": spec["seed"],
        "attn_implementation": FORCE_EAGER.get(arch, "default"),
        "weights": "torch.manual_seed(seed); model = model_class(config); "
                   + ("Conv1D biases += normal(0, 0.02) from torch.Generator().manual_seed(seed + 1); "
                      if arch in PERTURB_BIASES else "")
                   + "every floating parameter p.data = p.data.to(torch.bfloat16).to(torch.float32)",
        "rebuild": f"cfg = transformers.{spec['config'].__name__}.from_json_file('config.json'); "
                   f"torch.manual_seed({spec['seed']}); "
                   f"m = transformers.{spec['model'].__name__}(cfg"
                   + (", attn_implementation='eager'" if arch in FORCE_EAGER else "")
                   + "); perturb (PERTURB_BIASES) and round to bf16 as make_model does",
    }


# GPT-2's Conv1D biases start at zero, and the dynamo exporter drops a zero
# bias (Gemm with no C): nothing in the file could train them.  A trained
# GPT-2 has nonzero biases; these get normal(0, 0.02) noise, the norm weights
# and biases keep transformers' init (and are merged by the exporters).
PERTURB_BIASES = {"gpt2": (".attn.c_attn.bias", ".attn.c_proj.bias", ".mlp.c_fc.bias",
                           ".mlp.c_proj.bias")}


def make_model(arch, cfg):
    spec = ARCHS[arch]
    torch.manual_seed(spec["seed"])
    kw = {"attn_implementation": FORCE_EAGER[arch]} if arch in FORCE_EAGER else {}
    if kw:
        cfg._attn_implementation = FORCE_EAGER[arch]
    model = spec["model"](cfg)
    with torch.no_grad():
        g = torch.Generator().manual_seed(spec["seed"] + 1)
        for name, p in model.named_parameters():
            if arch in PERTURB_BIASES and name.endswith(PERTURB_BIASES[arch]):
                p.add_(torch.randn(p.shape, generator=g) * 0.02)
            if p.is_floating_point():
                p.data = p.data.to(torch.bfloat16).to(torch.float32)
    return model.eval()


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

def make_batch(arch, cfg, rng, batch, seq, pad):
    """input_ids, attention_mask, labels (int64 [batch, seq]).

    Real tokens are drawn from 5..255 (never a pad id, so an embedding's
    padding_idx row is only read at padded positions, which get no gradient).
    The last row ends with `pad` padded positions (attention_mask 0, input id
    the config's pad id, label -100).  Causal LM: labels = input_ids with the
    first 2 positions of row 0 and the padded positions set to -100 (the model
    shifts them itself).  BERT MLM: 3 positions of every row (among the real
    tokens) become [MASK] with the original token as label; all other labels
    are -100."""
    ids = rng.integers(5, 256, size=(batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    real = seq - pad
    mask[-1, real:] = 0
    ids[-1, real:] = pad_id(cfg)
    if ARCHS[arch]["task"] == "causal":
        labels = ids.copy()
        labels[0, :2] = IGNORE_INDEX
        labels[-1, real:] = IGNORE_INDEX
    else:
        labels = np.full((batch, seq), IGNORE_INDEX, dtype=np.int64)
        for r in range(batch):
            n = real if r == batch - 1 else seq
            for j in sorted(rng.choice(np.arange(1, n), size=3, replace=False)):
                labels[r, j] = ids[r, j]
                ids[r, j] = MASK_ID
    return ids, mask, labels


def test_batch(arch, cfg):
    rng = np.random.default_rng(ARCHS[arch]["seed"] + 10)
    return make_batch(arch, cfg, rng, BATCH, SEQ, PAD_LAST_ROW)


def other_batches(arch, cfg):
    """Other shapes, to check the legacy files' dynamic axes."""
    rng = np.random.default_rng(99)
    return [make_batch(arch, cfg, rng, 3, 7, 2), make_batch(arch, cfg, rng, 1, 64, 0)]


def names(labels):
    ins = ["input_ids", "attention_mask"] + (["labels"] if labels else [])
    outs = ["loss", "logits"] if labels else ["logits"]
    return ins, outs


def set_forward(model, labels):
    """Positional forward with the graph's inputs and outputs, set on the
    instance (no wrapper module: initializer names stay the torch names)."""
    fwd = type(model).forward

    if labels:
        def forward(input_ids, attention_mask, labels):
            o = fwd(model, input_ids=input_ids, attention_mask=attention_mask, labels=labels)
            return o.loss, o.logits
    else:
        def forward(input_ids, attention_mask):
            return fwd(model, input_ids=input_ids, attention_mask=attention_mask).logits
    model.forward = forward


def eager(model, batch, labels):
    ids, mask, lab = [torch.from_numpy(a) for a in batch]
    with torch.no_grad():
        o = model(input_ids=ids, attention_mask=mask, labels=lab if labels else None)
    return [o.loss.numpy(), o.logits.numpy()] if labels else [o.logits.numpy()]


# --------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------

def export(model, exporter, labels, batch, path):
    ins, outs = names(labels)
    args = tuple(torch.from_numpy(a) for a in batch[:len(ins)])
    set_forward(model, labels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if exporter == "legacy":
                dyn = {n: {0: "batch", 1: "seq"} for n in ins}
                dyn["logits"] = {0: "batch", 1: "seq"}
                torch.onnx.export(model, args, path, dynamo=False, opset_version=LEGACY_OPSET,
                                  input_names=ins, output_names=outs, dynamic_axes=dyn)
                return None
            prog = torch.onnx.export(model, args, dynamo=True, input_names=ins,
                                     output_names=outs, external_data=False)
            prog.save(path, external_data=False)
    finally:
        del model.forward
    relativize_paths(path)
    # the parameters and buffers the forward reads: the lifted placeholders
    # that have users (torch.export lifts every buffer, read or not)
    ep = prog.exported_program
    lifted = dict(ep.graph_signature.inputs_to_parameters)
    lifted.update(ep.graph_signature.inputs_to_buffers)
    return {lifted[n.name] for n in ep.graph.nodes
            if n.op == "placeholder" and n.name in lifted and n.users}


def path_prefixes():
    """Absolute folders that appear in the dynamo exporter's stack traces."""
    pre = {REPO + os.sep: "", os.path.dirname(os.path.dirname(transformers.__file__)) + os.sep:
           "site-packages/"}
    for p in [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]] \
            + site.getsitepackages():
        pre.setdefault(p.rstrip(os.sep) + os.sep, "site-packages/")
    pre.setdefault(os.path.dirname(os.__file__) + os.sep, "python/")
    return sorted(pre.items(), key=lambda kv: -len(kv[0]))


def relativize_paths(path):
    """The dynamo exporter stores each node's Python stack trace in
    metadata_props with absolute file names: make the repository's relative
    and replace the site-packages / standard library folders by
    `site-packages/` / `python/`, so that the files do not depend on the
    machine.  Nothing else is changed."""
    m = onnx.load(path)
    pre = path_prefixes()
    holders = [m, m.graph] + list(m.graph.node) + list(m.graph.value_info) \
        + list(m.graph.input) + list(m.graph.output) + list(m.graph.initializer)
    for fn in m.functions:
        holders += [fn] + list(fn.node)
    for h in holders:
        for p in h.metadata_props:
            for a, b in pre:
                p.value = p.value.replace(a, b)
    onnx.save(m, path)


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------

def write_pb(path, array, name):
    t = onnx.numpy_helper.from_array(np.array(array, order="C"), name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def ort_run(path, feeds, optimize=False):
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = (onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return [o.name for o in sess.get_outputs()], sess.run(None, feeds)


def compare(ref, got):
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if ref.shape != got.shape:
        return math.inf, math.inf, False
    d = np.abs(ref - got)
    rel = d / np.maximum(np.abs(ref), 1e-30)
    return float(d.max()), float(rel.max()), bool(np.all(d <= ATOL + RTOL * np.abs(ref)))


def op_histogram(m):
    hist = collections.Counter()

    def walk(graph):
        for n in graph.node:
            hist[(n.domain + "::" if n.domain not in ("", "ai.onnx") else "") + n.op_type] += 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(m.graph)
    return hist


# --------------------------------------------------------------------------
# Initializers -> torch names
# --------------------------------------------------------------------------

def torch_tensors(model, used):
    """[(names, kind, array)] for every parameter (tied names together) and
    buffer the forward reads (`used`, from torch.export's graph signature)."""
    groups = collections.OrderedDict()
    for n, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), (p, []))[1].append(n)
    out = []
    for p, ns in groups.values():
        if any(n in used for n in ns):
            out.append((ns, "param", p.detach().numpy()))
    for n, b in model.named_buffers():
        if n in used:
            out.append(([n], "buffer", b.detach().numpy()))
    return out


def varied(x):
    """Not all values equal (so the values identify the tensor)."""
    return x.size > 1 and bool(np.any(x.ravel() != x.ravel()[0]))


def match_layout(a, t, plus_one=False):
    """How initializer values a hold torch tensor t: same | transposed |
    reshaped | sliced (a leading block of t's values, e.g. rows 0..15 of a
    position table or position_ids[:, :16]) | plus_one (1 + t, Gemma's norm
    weights folded with their `1 +`), else None."""
    if t.size <= 1 or a.size <= 1 or a.dtype != t.dtype:
        return None
    if a.shape == t.shape and np.array_equal(a, t):
        return "same"
    if t.ndim == 2 and a.shape == t.T.shape and np.array_equal(a, t.T):
        return "transposed"
    if a.size == t.size and np.array_equal(a.ravel(), t.ravel()):
        return "reshaped"
    flat = t.ravel()
    if a.size < t.size and a.size >= 16 and varied(a) \
            and np.array_equal(a.ravel(), flat[:a.size]):
        return "sliced"
    if plus_one and a.dtype.kind == "f" and a.size == t.size \
            and np.array_equal(a.ravel(), (1.0 + t).ravel().astype(a.dtype)):
        return "plus_one"
    return None


def node_scope(n):
    """The torch module a node comes from: dynamo's name_scopes metadata
    (['', 'model', 'model.layers.0', ..., op]) or the legacy node name
    (/model/layers.0/input_layernorm/Mul_1)."""
    for p in n.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            scopes = ast.literal_eval(p.value)
            return scopes[-2] if len(scopes) >= 2 else ""
    parts = [x for x in n.name.split("/") if x]
    return ".".join(parts[:-1]) if len(parts) > 1 else ""


def initializer_uses(m):
    """initializer name -> (names it is read under, scopes of its readers).
    The legacy exporter expresses a merged initializer as Identity nodes
    whose outputs carry the other torch names: they are followed."""
    readers = collections.defaultdict(list)

    def walk(graph):
        for n in graph.node:
            for i in n.input:
                readers[i].append(n)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(m.graph)
    out = {}
    for init in m.graph.initializer:
        names, scopes, todo = {init.name}, set(), [init.name]
        while todo:
            v = todo.pop()
            for n in readers.get(v, []):
                if n.op_type == "Identity":
                    names.add(n.output[0])
                    todo.append(n.output[0])
                else:
                    scopes.add(node_scope(n))
        out[init.name] = (names, scopes)
    return out


def module_of(name):
    return name.rsplit(".", 1)[0] if "." in name else ""


def classify_initializers(m, model, used, plus_one):
    """One row per initializer: (onnx_name, dtype, shape, kind, torch_name, layout).

    An initializer stands for a torch tensor (parameter or buffer the forward
    reads) whose values it holds in some layout, when the graph says so:
      - it is read under the tensor's name (its own name, or, legacy, the
        output of an Identity node of the merged initializer), or
      - a node of the tensor's module reads it (dynamo's name scopes, legacy
        node names), or
      - the values identify the tensor (not all equal, e.g. random weights)
        and the tensor is not stored as is under its own name elsewhere.
    The first two matter for tensors of equal values (norm weights all ones,
    biases all zeros), which both exporters merge into one initializer: such a
    row lists all the torch names it stands for, joined by '=', as do tied
    weights."""
    tensors = torch_tensors(model, used)
    inits = [(i.name, onnx.numpy_helper.to_array(i)) for i in m.graph.initializer]
    uses = initializer_uses(m)
    init_names = {n for n, _ in inits}
    named = {id(t[2]) for t in tensors if any(n in init_names for n in t[0])}
    rows, stands = [], collections.defaultdict(list)
    for iname, a in inits:
        hits = []
        read_as, scopes = uses[iname]
        for t in tensors:
            ns, kind, arr = t
            lay = match_layout(a, arr, plus_one)
            if lay is None:
                continue
            by_name = any(n in read_as for n in ns)
            by_scope = any(s == module_of(n) or s.startswith(module_of(n) + ".")
                           for n in ns for s in scopes if module_of(n))
            by_value = varied(arr) and (id(arr) not in named or lay != "same")
            if by_name or by_scope or by_value:
                hits.append((ns, kind, lay))
        if not hits:
            row = (iname, str(a.dtype), dims(a.shape), "constant", "-", "-")
        else:
            kinds = {h[1] for h in hits}
            lays = {h[2] for h in hits}
            if len(kinds) > 1 or len(lays) > 1:
                raise SystemExit(f"initializer {iname}: ambiguous sources {hits}")
            # own name first, then the others in model order
            hits.sort(key=lambda h: iname not in h[0])
            tn = "=".join(n for h in hits for n in h[0])
            row = (iname, str(a.dtype), dims(a.shape), kinds.pop(), tn, lays.pop())
            for h in hits:
                stands[h[0][0]].append(iname)
        rows.append(row)
    missing = [t[0] for t in tensors if t[0][0] not in stands]
    return rows, missing


def dims(shape):
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


def constant_node_sources(m, model, used):
    """Constant nodes holding a torch parameter or buffer (folded into the
    graph instead of stored as an initializer)."""
    tensors = torch_tensors(model, used)
    out = []
    for n in m.graph.node:
        if n.op_type != "Constant":
            continue
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                arr = onnx.numpy_helper.to_array(a.t)
                for ns, kind, t in tensors:
                    lay = match_layout(arr, t)
                    if lay:
                        out.append((n.output[0], dims(arr.shape), kind, "=".join(ns), lay))
    return out


def describe_constant(a, model, cfg):
    """A guess at what a folded tensor is, for the README (large ones only)."""
    if a.dtype == np.bool_:
        if a.ndim >= 2 and a.shape[-1] == a.shape[-2]:
            s = a.shape[-1]
            if np.array_equal(a.reshape(-1, s, s)[0], np.tril(np.ones((s, s), dtype=bool))):
                return "causal mask (j <= i)"
        return "boolean mask"
    if a.dtype.kind == "f":
        inv = None
        for n, b in model.named_buffers():
            if n.endswith("inv_freq") and not n.endswith("original_inv_freq"):
                inv = b.detach().numpy().astype(np.float64)
        if inv is not None and a.shape[-1] == 2 * inv.size:
            s = a.shape[-2]
            freqs = np.arange(s)[:, None] * inv[None, :]
            emb = np.concatenate([freqs, freqs], -1)
            flat = a.reshape(-1, s, a.shape[-1])[0]
            if np.allclose(flat, np.cos(emb), atol=1e-6):
                return "RoPE cos table"
            if np.allclose(flat, np.sin(emb), atol=1e-6):
                return "RoPE sin table"
        if np.all((a == 0) | (a <= -3e38)):
            return "additive mask (0 / finfo.min)"
        return "folded float tensor"
    return "index tensor"


# --------------------------------------------------------------------------
# One export
# --------------------------------------------------------------------------

def export_one(arch, cfg, model, variant, batch, summary, used_by_variant):
    exporter = variant.split("-")[0]
    labels = variant.endswith("-labels")
    folder = os.path.join(OUT, arch, variant)
    os.makedirs(folder)
    path = os.path.join(folder, "model.onnx")
    ins, outs = names(labels)
    used = export(model, exporter, labels, batch, path)
    if used is not None:
        used_by_variant[labels] = used
    used = used_by_variant[labels]      # legacy: what the dynamo export of the same forward read

    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    gi = [i.name for i in m.graph.input]
    go = [o.name for o in m.graph.output]
    if gi != ins or go != outs:
        raise SystemExit(f"{arch}/{variant}: graph inputs {gi}, outputs {go}")

    ref = eager(model, batch, labels)
    ds = os.path.join(folder, "test_data_set_0")
    os.makedirs(ds)
    for i, (n, a) in enumerate(zip(ins, batch)):
        write_pb(os.path.join(ds, f"input_{i}.pb"), a, n)
    for i, (n, a) in enumerate(zip(outs, ref)):
        write_pb(os.path.join(ds, f"output_{i}.pb"), a, n)

    feeds = dict(zip(ins, batch))
    errs = {}
    for optimize in (False, True):
        ort_names, got = ort_run(path, feeds, optimize)
        for n, r, g in zip(ort_names, ref, got):
            amax, rmax, ok = compare(r, g)
            old = errs.get(n, (0.0, 0.0))
            errs[n] = (max(old[0], amax), max(old[1], rmax))
            print(f"  {arch:8s} {variant:14s} ort-opt={int(optimize)} {n:6s} max abs err "
                  f"{amax:.3e}  max rel err {rmax:.3e}  {'ok' if ok else 'FAIL'}")
            if not ok:
                raise SystemExit(f"{arch}/{variant}: onnxruntime differs from PyTorch eager on "
                                 f"{n} beyond rtol {RTOL} / atol {ATOL}")
    dyn = []
    if exporter == "legacy":
        for other in other_batches(arch, cfg):
            ref2 = eager(model, other, labels)
            _, got2 = ort_run(path, dict(zip(ins, other)))
            worst = max(compare(r, g)[0] for r, g in zip(ref2, got2))
            ok = all(compare(r, g)[2] for r, g in zip(ref2, got2))
            print(f"  {arch:8s} {variant:14s} shape {other[0].shape} max abs err {worst:.3e}  "
                  f"{'ok' if ok else 'FAIL'}")
            if not ok:
                raise SystemExit(f"{arch}/{variant}: wrong result for input shape "
                                 f"{other[0].shape}: the dynamic axes do not hold")
            dyn.append((other[0].shape, worst))

    hist = op_histogram(m)
    plus_one = arch == "gemma"
    inits, missing = classify_initializers(m, model, used, plus_one)
    with open(os.path.join(folder, "initializers.txt"), "w") as f:
        f.write("# onnx_name\tdtype\tshape\tkind\ttorch_name\tlayout\n")
        for r in inits:
            f.write("\t".join(r) + "\n")
    with open(os.path.join(folder, "ops.txt"), "w") as f:
        f.write("# op_type\tcount (main graph; functions listed after)\n")
        for k, v in sorted(hist.items()):
            f.write(f"{k}\t{v}\n")
        for fn in m.functions:
            f.write(f"# function {fn.domain}::{fn.name}\n")
            for k, v in sorted(collections.Counter(n.op_type for n in fn.node).items()):
                f.write(f"{fn.name}:{k}\t{v}\n")

    big = []
    init_arrays = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    for r in inits:
        a = init_arrays[r[0]]
        if r[3] == "constant" and a.size > 16:
            big.append((r[0], r[1], r[2], describe_constant(a, model, cfg)))

    def vdims(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    summary[(arch, variant)] = dict(
        ir_version=m.ir_version,
        opsets={o.domain or "ai.onnx": o.version for o in m.opset_import},
        functions=[f"{fn.domain}::{fn.name}" for fn in m.functions],
        nodes=sum(hist.values()), hist=dict(hist), inits=inits, missing=missing,
        big_constants=big, constant_sources=constant_node_sources(m, model, used),
        inputs=[(i.name, vdims(i)) for i in m.graph.input],
        outputs=[(o.name, vdims(o)) for o in m.graph.output],
        errs=errs, dyn=dyn, size=os.path.getsize(path),
        graph=graph_facts(m, inits, labels),
    )


def producers(m):
    return {o: n for n in m.graph.node for o in n.output}


def graph_facts(m, inits, labels):
    """How the lm head and the label shift appear (for README)."""
    prod = producers(m)
    rowmap = {r[0]: r for r in inits}
    facts = {}
    # lm head: walk back from `logits` through layout ops to the MatMul / Gemm
    v, chain = "logits", []
    while v in prod and prod[v].op_type in ("Reshape", "Add", "Identity", "Cast", "Squeeze",
                                            "Unsqueeze", "Transpose", "MatMul", "Gemm"):
        n = prod[v]
        chain.append(n.op_type)
        if n.op_type in ("MatMul", "Gemm"):
            w = n.input[1]
            desc = f"{n.op_type}"
            if n.op_type == "Gemm":
                desc += " transB=%d" % next((a.i for a in n.attribute if a.name == "transB"), 0)
            if w in rowmap:
                r = rowmap[w]
                desc += f" with initializer `{w}` [{r[2]}] = {r[4]} ({r[5]})"
            elif w in prod:
                p = prod[w]
                src = p.input[0]
                r = rowmap.get(src)
                desc += (f" with `{p.op_type}({src})`" + (f" = {r[4]} ({r[5]})" if r else ""))
            facts["lm_head"] = desc + ("" if len(chain) == 1 else
                                       " (then " + " → ".join(reversed(chain[:-1])) + ")")
            break
        v = n.input[0] if n.op_type != "Add" or n.input[0] in prod else n.input[1]
    if labels:
        ops = [n for n in m.graph.node if n.op_type == "SoftmaxCrossEntropyLoss"]
        facts["loss"] = "SoftmaxCrossEntropyLoss" if ops else "decomposed"
        if ops:
            a = {x.name: x for x in ops[0].attribute}
            facts["loss"] += (f" (reduction={a['reduction'].s.decode() if 'reduction' in a else 'mean'}"
                              f", ignore_index={a['ignore_index'].i if 'ignore_index' in a else '-'}"
                              f", {len([o for o in ops[0].output if o])} output)")
            # label side: walk back from the target input
            v, chain = ops[0].input[1], []
            while v in prod and v != "labels":
                n = prod[v]
                chain.append(n.op_type)
                v = n.input[0]
            facts["shift"] = " → ".join(["labels"] + list(reversed(chain)))
            v, chain = ops[0].input[0], []
            while v in prod and v != "logits":
                n = prod[v]
                chain.append(n.op_type)
                if n.op_type in ("MatMul", "Gemm"):
                    break
                v = n.input[0]
            facts["logit_side"] = " → ".join(["logits"] + list(reversed(chain)))
    return facts


# --------------------------------------------------------------------------
# Training references
# --------------------------------------------------------------------------

def train(arch, cfg, make_opt, batch):
    """TRAIN_STEPS steps on the one batch; loss logged before each update."""
    model = make_model(arch, cfg).train()
    opt = make_opt(model.parameters())
    ids, mask, lab = [torch.from_numpy(a) for a in batch]
    losses = []
    for step in range(TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise SystemExit(f"{arch}: training diverged at step {step}")
    return losses


def record_training(arch, cfg, batch, summary):
    runs = {"sgd": lambda p: torch.optim.SGD(p, **SGD_HP),
            "adamw": lambda p: torch.optim.AdamW(p, **ADAMW_HP)}
    for name, make_opt in runs.items():
        losses = train(arch, cfg, make_opt, batch)
        with open(os.path.join(OUT, arch, f"train_{name}.csv"), "w") as f:
            f.write("step,loss\n")
            for s, l in enumerate(losses):
                f.write(f"{s},{l:.9g}\n")
        summary[(arch, "train_" + name)] = losses
        print(f"  {arch:8s} {name:6s} loss {losses[0]:.6f} -> {losses[-1]:.6f}")
    # step 0 runs on the initial weights: the -labels files give that loss
    first = summary[(arch, "train_sgd")][0]
    for variant in ("legacy-labels", "dynamo-labels"):
        path = os.path.join(OUT, arch, variant, "model.onnx")
        _, got = ort_run(path, dict(zip(names(True)[0], batch)))
        if not abs(float(got[0]) - first) <= ATOL + RTOL * abs(first):
            raise SystemExit(f"{arch}/{variant}: onnxruntime loss {float(got[0])} differs from "
                             f"the recorded step-0 loss {first}")


# --------------------------------------------------------------------------
# README
# --------------------------------------------------------------------------

def versions():
    return [("python", platform.python_version()), ("torch", torch.__version__),
            ("transformers", transformers.__version__), ("onnx", onnx.__version__),
            ("onnxruntime", onnxruntime.__version__), ("onnxscript", onnxscript.__version__),
            ("numpy", np.__version__)]


def tree_sizes():
    rows, total = [], 0
    for root, ds, files in os.walk(OUT):
        ds.sort()
        for fn in sorted(files):
            p = os.path.join(root, fn)
            if os.path.relpath(p, OUT) == "README.md":
                continue
            sz = os.path.getsize(p)
            total += sz
            rows.append((os.path.relpath(p, OUT), sz))
    return rows, total


def arch_line(arch, cfg, model):
    c = cfg
    n = sum(p.numel() for p in model.parameters())
    tied = getattr(c, "tie_word_embeddings", False)
    if arch == "gpt2":
        shape = (f"hidden {c.n_embd}, {c.n_layer} layers, {c.n_head} heads, MLP {c.n_inner}, "
                 f"{c.n_positions} learned positions, activation {c.activation_function}")
    elif arch == "bert":
        shape = (f"hidden {c.hidden_size}, {c.num_hidden_layers} layers, {c.num_attention_heads} "
                 f"heads, intermediate {c.intermediate_size}, {c.max_position_embeddings} learned "
                 f"positions, activation {c.hidden_act}, pad id {c.pad_token_id}")
    else:
        hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        shape = (f"hidden {c.hidden_size}, {c.num_hidden_layers} layers, {c.num_attention_heads} "
                 f"heads / {c.num_key_value_heads} key-value heads (head dim {hd}), "
                 f"intermediate {c.intermediate_size}, max positions {c.max_position_embeddings}, "
                 f"activation {c.hidden_act}, RMSNorm eps {c.rms_norm_eps:g}, "
                 f"pad id {c.pad_token_id}")
    return (f"| {arch} | `{ARCHS[arch]['model'].__name__}` | {n} | {shape}; "
            f"{'tied' if tied else 'untied'} embeddings | seed {ARCHS[arch]['seed']}, "
            f"attention `{model.config._attn_implementation}` |")


def write_readme(summary, cfgs, models):
    out = io.StringIO()
    w = lambda s="": out.write(s + "\n")
    w("# models/hf/ — Hugging Face transformers exports with PyTorch references")
    w()
    w("Generated by `models/hf_export.py`; edit the script, not the files.  **This README is")
    w("generated too.**  The C tests read these files and never need PyTorch.")
    w()
    w("## Regenerate")
    w()
    w("```")
    w("pip install torch transformers onnx onnxruntime onnxscript")
    w("python3 models/hf_export.py")
    w("```")
    w()
    w("The script deletes and rewrites `models/hf/`.  It is deterministic (fixed seeds, one")
    w("thread, `torch.use_deterministic_algorithms(True)`); no network access (random weights).")
    w("Versions used for the committed files:")
    w()
    w("| package | version |")
    w("| --- | --- |")
    for k, v in versions():
        w(f"| {k} | {v} |")
    w()
    w("Other torch / transformers / onnxscript versions give other graphs (node names,")
    w("decompositions, folding, mask construction).  The test data are PyTorch eager outputs.")
    w()
    w("## Layout")
    w()
    w("```")
    w("models/hf/<arch>/config.json                 config.to_json_file (rebuild the model from it)")
    w("models/hf/<arch>/build.json                  seed, model class, attention, how to rebuild")
    w("models/hf/<arch>/<export>/model.onnx         export = legacy | dynamo | legacy-labels | dynamo-labels")
    w("models/hf/<arch>/<export>/test_data_set_0/input_<i>.pb   graph inputs, graph order")
    w("models/hf/<arch>/<export>/test_data_set_0/output_<i>.pb  PyTorch eager outputs, graph order")
    w("models/hf/<arch>/<export>/initializers.txt   every initializer and its torch source(s)")
    w("models/hf/<arch>/<export>/ops.txt            op histogram")
    w("models/hf/<arch>/train_sgd.csv, train_adamw.csv   step,loss, 5 steps on the -labels batch")
    w("```")
    w()
    w("Without labels the graph is `(input_ids, attention_mask) -> logits`; with labels")
    w("`(input_ids, attention_mask, labels) -> (loss, logits)` (the order of transformers'")
    w("`ModelOutput`).  All inputs are int64 [batch, seq]; `logits` float [batch, seq, 256].")
    w("Each `.pb` is an `onnx.TensorProto` (`onnx.numpy_helper.from_array`) named like the graph")
    w("input / output.  All four exports of one architecture share the same weights and the")
    w("same batch (the no-label exports take its first two tensors).")
    w()
    w("`initializers.txt` has the columns of `models/*/<exporter>/initializers.txt`: ONNX name,")
    w("dtype, shape, kind, torch name, layout.  kind: `param` (trainable torch parameter),")
    w("`buffer` (torch buffer), `constant` (anything else: shapes, scalars, and tensors the")
    w("exporter computed by folding, e.g. RoPE cos/sin tables and masks).  torch name: every")
    w("torch tensor the initializer stands for, joined by `=`: tied parameters (all their")
    w("names), and parameters whose equal values the exporter merged into one initializer")
    w("(norm weights all ones, biases all zeros: an initializer then stands for several")
    w("*separate* torch parameters, see *Merged initializers*).  layout: `same`, `transposed`")
    w("(the exporter folded `Transpose(W)` into a new initializer), `reshaped` (same values,")
    w("other shape), `sliced` (a leading block of the tensor's values, e.g. rows 0..15 of a")
    w("position table or `position_ids[:, :16]`), `plus_one` (holds `1 + w`: Gemma's")
    w("RMSNorm `(1 + weight)` folded).  The mapping is computed from the values: each")
    w("initializer is compared with the parameters and buffers the forward reads (from")
    w("torch.export's graph signature; `original_inv_freq` is never read).")
    w()
    w("## Architectures")
    w()
    w("Random weights: `torch.manual_seed(seed); model = ModelClass(config)` (transformers'")
    w("own init: normal(0, 0.02) matrices, zero biases, norm weights ones — Gemma's zeros, as")
    w("it computes `x * (1 + w)`), then every floating parameter rounded to a")
    w("bfloat16-representable fp32 value (`p.to(torch.bfloat16).to(torch.float32)`), so that")
    w("the files compress.  GPT-2's Conv1D biases (zero at init) get normal(0, 0.02) noise")
    w("first: the dynamo exporter drops a zero Gemm bias, and a file without it cannot train it.")
    w("Every dropout probability is 0.  The exports are made in `eval()`")
    w("mode (what a user exporting a model does; with dropout 0, `train()` computes the same")
    w("function, and the training references run in `train()` mode).  `use_cache=False`.")
    w()
    w("| arch | class | parameters | shape | seed, attention |")
    w("| --- | --- | ---: | --- | --- |")
    for a in ARCHS:
        w(arch_line(a, cfgs[a], models[a]))
    w()
    w("The attention implementation is the one a user gets by default (`sdpa`, PyTorch's")
    w("`scaled_dot_product_attention`); every exporter handled it, so no model needed")
    w("`attn_implementation=\"eager\"`." if not FORCE_EAGER else
      "Forced to `eager` because the default failed to export: " +
      "; ".join(f"{a}: {ATTN_NOTES[a]}" for a in FORCE_EAGER) + ".")
    w("Token ids the defaults put outside a 256-entry vocabulary were moved: Phi-3 bos 1, eos 2,")
    w("pad 0 (default pad = eos = 32000); GPT-2 bos = eos = 255 (default 50256).  Gemma, Phi-3 and")
    w("BERT have a pad id 0, so their embedding has `padding_idx=0` (row 0 zero at init, no")
    w("gradient through the lookup): real tokens are drawn from 5..255 and id 0 appears only at")
    w("padded positions, which get no gradient anyway.")
    w()
    w("## Data")
    w()
    w(f"batch {BATCH} × seq {SEQ}; real tokens uniform in 5..255 (numpy seed = arch seed + 10);")
    w(f"`attention_mask` is 1 except the last {PAD_LAST_ROW} positions of row 1 (padding at the end,")
    w("input id = the config's pad id, or 0).")
    w()
    w("- causal LMs: `labels = input_ids`, with -100 on the first 2 positions of row 0 and on")
    w("  the padded positions; the model shifts them itself (transformers' `ForCausalLMLoss`:")
    w("  `pad(labels, (0, 1), value=-100)[..., 1:]`, logits upcast to float, all positions,")
    w("  `cross_entropy(..., ignore_index=-100, reduction='mean')`): the number of counted")
    w(f"  tokens is 14 + 12 = 26 of {BATCH * SEQ}.")
    w(f"- BERT MLM: 3 positions per row (among the real tokens) become [MASK] (id {MASK_ID}) with")
    w("  the original token as label; every other label is -100 (6 counted tokens).")
    w()
    w("## Training references")
    w()
    w(f"`train_sgd.csv` / `train_adamw.csv`: {TRAIN_STEPS} steps on the one batch of")
    w("`<export>-labels/test_data_set_0` (the same inputs in both `-labels` folders), from the")
    w("initial weights (those of every `model.onnx`), model in `train()` mode, the torch")
    w("parameters trained as PyTorch holds them (tied weights are one parameter; the merged")
    w("initializers of the ONNX files are separate parameters in PyTorch):")
    w()
    w("```python")
    w("opt.zero_grad(); loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss")
    w("loss.backward(); opt.step()")
    w("```")
    w()
    w("Header `step,loss`; step counts from 0; `loss` is the loss of that step computed")
    w("*before* its update (as `graphfuse train --log` and `models/*/train_*.csv`), printed with 9")
    w("significant digits.  Step 0 is the `loss` output of the `-labels` test data.")
    w()
    w("| file | optimizer | graphfuse train options |")
    w("| --- | --- | --- |")
    w(f"| train_sgd.csv | torch.optim.SGD(lr {SGD_HP['lr']}, momentum {SGD_HP['momentum']}) | "
      "`--optimizer sgd --lr 0.1 --momentum 0.9` |")
    w(f"| train_adamw.csv | torch.optim.AdamW(lr {ADAMW_HP['lr']:g}, betas {ADAMW_HP['betas']}, "
      f"eps {ADAMW_HP['eps']:g}, weight_decay {ADAMW_HP['weight_decay']}) | `--optimizer adamw "
      "--lr 0.001 --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0.01` |")
    w()
    w("with `--data models/hf/<arch>/<export>-labels --steps 5` (the export folder holds")
    w("`test_data_set_0`; output files are ignored by `--data`).  A file trained as it is")
    w("(one parameter per initializer) does not follow these curves where the exporter")
    w("merged equal parameters, dropped zero biases or folded a parameter into a `sliced`")
    w("constant (see *Notes*): the references are PyTorch's, with its separate parameters.")
    w()
    w("| arch | SGD step 0 → 4 | AdamW step 0 → 4 |")
    w("| --- | --- | --- |")
    for a in ARCHS:
        s, d = summary[(a, "train_sgd")], summary[(a, "train_adamw")]
        w(f"| {a} | {s[0]:.6f} → {s[-1]:.6f} | {d[0]:.6f} → {d[-1]:.6f} |")
    w()
    w("## Exporters")
    w()
    w("- `legacy`: `torch.onnx.export(model, args, path, dynamo=False, opset_version=17,")
    w("  input_names=..., output_names=..., dynamic_axes={input: {0: 'batch', 1: 'seq'},")
    w("  'logits': {0: 'batch', 1: 'seq'}})` (TorchScript tracing, default")
    w("  `do_constant_folding=True`; in `eval()` mode it also deduplicates initializers with")
    w("  equal values).  Checked with onnxruntime on two more shapes (batch 3 × seq 7 with")
    w("  padding, batch 1 × seq 64).")
    w("- `dynamo`: `torch.onnx.export(model, args, dynamo=True, input_names=...,")
    w("  output_names=..., external_data=False)` and `save(path, external_data=False)`:")
    w("  its defaults (`optimize=True`, default opset), no `dynamic_shapes`, so **static")
    w(f"  shapes** [{BATCH}, {SEQ}] (the masks, RoPE tables and position lookups are folded for")
    w("  that length).  The absolute file names in the stack traces of the nodes'")
    w("  `metadata_props` are rewritten (`site-packages/`, `python/`, repository-relative);")
    w("  nothing else is changed.")
    w()
    w("Both are given the model itself, its `forward` replaced on the instance by")
    w("`forward(input_ids, attention_mask[, labels])` returning `logits` or `(loss, logits)` from")
    w("the class's forward (the legacy exporter does not pass keyword arguments by name), so")
    w("initializer names are the torch names.")
    w()
    w("| arch | export | opset | IR | nodes | size | inputs | max abs err vs eager (ORT) |")
    w("| --- | --- | --- | --- | ---: | ---: | --- | --- |")
    for a in ARCHS:
        for v in EXPORTS:
            s = summary[(a, v)]
            ops = ", ".join(f"{k} {x}" for k, x in sorted(s["opsets"].items()))
            shp = s["inputs"][0][1]
            err = " / ".join(f"{k} {e[0]:.1e}" for k, e in s["errs"].items())
            w(f"| {a} | {v} | {ops} | {s['ir_version']} | {s['nodes']} | "
              f"{s['size'] / 1024:.1f} KiB | {shp} | {err} |")
    w()
    w("### Op histograms")
    w()
    for a in ARCHS:
        w(f"#### {a}")
        w()
        ops = sorted(set().union(*(summary[(a, v)]["hist"] for v in EXPORTS)))
        w("| op | " + " | ".join(EXPORTS) + " |")
        w("| --- |" + " ---: |" * len(EXPORTS))
        for op in ops:
            w(f"| {op} | " + " | ".join(str(summary[(a, v)]["hist"].get(op, 0) or "–")
                                       for v in EXPORTS) + " |")
        w("| **total** | " + " | ".join(str(summary[(a, v)]["nodes"]) for v in EXPORTS) + " |")
        w()
    w("### Initializers")
    w()
    w("Per export: counts by kind (layout), then the initializers that stand for more than one")
    w("torch tensor (merged or tied), parameters folded into something else, parameters or")
    w("buffers stored as `Constant` nodes, and the large folded constants.")
    w()
    for a in ARCHS:
        for v in EXPORTS:
            s = summary[(a, v)]
            kinds = collections.Counter((r[3], r[5]) for r in s["inits"])
            desc = ", ".join(f"{n} {k[0]}" + (f" ({k[1]})" if k[1] not in ("-", "same") else "")
                             for k, n in sorted(kinds.items()))
            w(f"- **{a}/{v}**: {len(s['inits'])} initializers — {desc}")
            for r in s["inits"]:
                if "=" in r[4]:
                    w(f"  - `{r[0]}` [{r[2]}] {r[5]}: {merged_text(r[4], models[a])}")
            for r in s["inits"]:
                if r[3] in ("param", "buffer") and r[5] not in ("same", "transposed") \
                        and "=" not in r[4]:
                    w(f"  - `{r[0]}` [{r[2]}] holds {r[3]} `{r[4]}` ({r[5]})")
            for c in s["constant_sources"]:
                w(f"  - {c[2]} `{c[3]}` is a `Constant` node `{c[0]}` [{c[1]}] ({c[4]}), "
                  f"not an initializer")
            gone = [ns for ns in s["missing"]
                    if not any(c[3].split("=")[0] == ns[0] for c in s["constant_sources"])]
            if gone:
                w("  - not in the file: " + ", ".join(
                    f"`{'='.join(ns)}` ({missing_reason(ns, models[a], s)})" for ns in gone))
            if s["big_constants"]:
                w("  - folded constants: " + ", ".join(
                    f"`{c[0]}` {c[1]} [{c[2]}] ({c[3]})" for c in s["big_constants"]))
    w()
    w("### Graph facts")
    w()
    w("| arch | export | lm head (producer of `logits`) | loss | label side | logit side |")
    w("| --- | --- | --- | --- | --- | --- |")
    for a in ARCHS:
        for v in EXPORTS:
            g = summary[(a, v)]["graph"]
            w(f"| {a} | {v} | {g.get('lm_head', '?')} | {g.get('loss', '–')} | "
              f"{g.get('shift', '–')} | {g.get('logit_side', '–')} |")
    w()
    w(NOTES_MARKER)
    w()
    w("## Files and sizes")
    w()
    rows, total = tree_sizes()
    w("```")
    for p, sz in rows:
        w(f"{sz:>9}  {p}")
    w(f"{total:>9}  total (models/hf/ without this README)")
    w("```")
    text = out.getvalue().replace(NOTES_MARKER, notes(summary))
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(text)


def missing_reason(ns, model, s):
    t = dict(model.named_parameters(remove_duplicate=False))
    t.update(dict(model.named_buffers()))
    x = t[ns[0]].detach()
    if x.numel() == 1:
        return "scalar, folded into a constant"
    if ns[0].endswith("bias") and not bool(x.any()):
        return "zero bias, its Add dropped by the optimizer"
    if ns[0].endswith("inv_freq"):
        return "folded into the RoPE cos/sin tables"
    return "folded"


def merged_text(names_joined, model):
    ns = names_joined.split("=")
    groups = collections.defaultdict(list)
    for n, p in model.named_parameters(remove_duplicate=False):
        groups[id(p)].append(n)
    tied = {n: g for g in groups.values() for n in g if len(g) > 1}
    params = []
    for n in ns:
        g = tied.get(n, [n])
        if g not in params:
            params.append(g)
    if len(params) == 1:
        return "tied: " + " = ".join(f"`{n}`" for n in ns) + " (one parameter)"
    return (f"merged: {len(params)} separate torch tensors with equal values: "
            + ", ".join("=".join(f"`{n}`" for n in g) for g in params))


NOTES_MARKER = "@@NOTES@@"


def notes(summary):
    """Observations about the graphs, checked by reading them; where a number
    can be taken from the files it is."""
    return NOTES


NOTES = """## Notes for graphfuse (read before writing a pattern or a trainer rule)

Written by reading the graphs made with the versions above; the Initializers and
Graph facts sections are computed from the files.

- **Merged equal initializers.**  With transformers' init every RMSNorm / LayerNorm
  weight is ones and every bias zeros; both exporters keep *one* initializer per distinct
  value.  The legacy exporter (it deduplicates initializers in `eval()` mode) keeps the
  first torch name and recreates the others as `Identity` nodes whose outputs carry the
  other torch names (`model.layers.1.input_layernorm.weight =
  Identity(model.layers.0.input_layernorm.weight)`); the dynamo exporter (onnxscript
  optimizer) makes every consumer read the one initializer directly.  In PyTorch they are
  separate parameters: training the merged initializer as one parameter sums their
  gradients and does not reproduce the reference CSVs.  A trainer that wants PyTorch's
  numbers must give each use its own copy (the legacy `Identity` outputs name them; for
  dynamo the node's `pkg.torch.onnx.name_scopes` metadata names the module).
- **Zero biases dropped.**  gpt2/dynamo: GPT-2's `Conv1D` layers become `Gemm` on a 2-D
  view, and the optimizer dropped the zero bias (`Gemm` with two inputs): the biases of
  `c_attn`, `c_proj`, `c_fc` are not in the file at all (not trainable from it).  Legacy
  keeps `Gemm(x, W, bias)` with the merged zero bias.  qwen2 and bert keep
  `MatMul → Add(zero bias)` in both exporters.
- **Gemma's `(1 + weight)`** is folded by both exporters into one initializer of ones
  [64] (`plus_one` layout; `onnx::Mul_<n>` / `add_4`) shared by all five RMSNorms: the
  parameters themselves are not stored.  Training it gives the same SGD steps as PyTorch
  (same gradient) but AdamW's weight decay then decays `1 + w` instead of `w`.
- **Tied embeddings** (gemma, gpt2, bert): legacy stores the table under its torch name and
  a folded transposed copy (`onnx::MatMul_<n>` [64x256]) for the head — two initializers,
  one parameter; dynamo stores one tensor (named `lm_head.weight` /
  `cls.predictions.decoder.weight`) read by the `Gather` and by a run-time `Transpose`
  for the head.  Untied heads are a `MatMul` with a folded transposed initializer
  (`onnx::MatMul_<n>` / `val_<n>`) in both.
- **Dynamo, static shapes [2, 16]**: folded into initializers — RoPE cos / sin tables
  [1x1x16x16] (`unsqueeze_14` / `unsqueeze_15`; `inv_freq` is gone), the causal mask
  (bool [1x1x16x16], `bitwise_and`, mistral `bitwise_and_2`), the `GatherND` indices
  int64 [2x1x1x16x2] that pick the padding mask out of `attention_mask`, and position
  lookups: gpt2 `embedding_1` [1x16x64] = rows 0..15 of `transformer.wpe.weight`, bert
  `embedding_2` [1x16x64] = rows 0..15 of `bert.embeddings.position_embeddings.weight`
  (learned parameters folded into a `sliced` initializer), bert `val_17` =
  `position_ids[:, :16]` and `expand` = the `token_type_ids` buffer [1x64].  Only
  `param` rows may be trained; `sliced` rows are parameters a trainer can only update
  in part.
- **Legacy, dynamic axes**: the masks are built at run time (`Range`, `LessOrEqual`,
  `And`, `Where`, `Expand`, ~200 `Constant` nodes and ~40 `Shape` per model); RoPE's
  `inv_freq` is a `Constant` node [8] and the cos / sin tables are computed at run time
  from it (one `Cos`, one `Sin` per graph).
- **Attention (sdpa)** is decomposed the same way by both exporters: `Mul(q, s)` and
  `Mul(kᵀ, s)` with `s = head_dim**-0.25` (0.5), `MatMul`, `Add(mask)` where the mask is
  `Where(bool, 0, -inf)` (legacy) or `Where(bool, 0, -3.4028235e38)` (dynamo), `Softmax`,
  then `Where(IsNaN(p), 0, p)` (sdpa's guard for fully masked rows), `MatMul(·, v)`.
  GQA's `repeat_kv` is `Unsqueeze → Expand → Reshape` of k and v.  No fused attention op.
- **Activations**: SiLU is `Sigmoid` + `Mul`; GPT-2's `gelu_new` is the explicit tanh
  formula (`Pow`, `Tanh`) in both; Gemma's `gelu_pytorch_tanh` is `Gelu(approximate=tanh)`
  in dynamo (opset 20) and the explicit tanh formula in legacy; BERT's `gelu` is
  `Gelu` in dynamo and `Erf`-based in legacy.  Phi-3's fused `qkv_proj` / `gate_up_proj`
  are split with `Slice` (legacy) or `Slice` / `Split` (dynamo).
- **Loss** (not decomposed): `SoftmaxCrossEntropyLoss(reduction=mean, ignore_index=-100)`,
  one output, on `Reshape(logits, [-1, 256])`.  Causal LMs shift the *labels*, not the
  logits: `Pad(labels, [0, 0, 0, 1], -100) → Slice(1:) → Reshape([-1])` (legacy adds a
  no-op `Cast` to int64); every position's logits enter the loss, the last one of each row
  against -100.  BERT: `Reshape(labels, [-1])`.  In the legacy `-labels` files the graph
  output `logits` is the output of a no-op `Cast(to=float)` (`logits.float()` in the
  loss) of the lm-head `MatMul`.
- **Export messages**: the dynamo export of bert prints `Evaluation failed: cannot
  reshape array of size 1 into shape (1,16)` twice (the onnxscript optimizer's constant
  folding gives up on one node and leaves it); the file is correct (onnxruntime check).
- **lm head** output is a graph output (`logits`), so a fused linear-cross-entropy must
  keep it."""


# --------------------------------------------------------------------------

def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions()))
    only = sys.argv[1:] or list(ARCHS)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)

    summary, cfgs, models = {}, {}, {}
    for arch in only:
        cfg = write_config(arch)
        model = make_model(arch, cfg)
        cfgs[arch], models[arch] = cfg, model
        batch = test_batch(arch, cfg)
        used_by_variant = {}
        for variant in ("dynamo", "dynamo-labels", "legacy", "legacy-labels"):
            export_one(arch, cfg, model, variant, batch, summary, used_by_variant)
        record_training(arch, cfg, batch, summary)

    if only == list(ARCHS):
        write_readme(summary, cfgs, models)
    rows, total = tree_sizes()
    print(f"wrote {len(rows)} files, {total} bytes")


if __name__ == "__main__":
    main()
