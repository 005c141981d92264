#!/usr/bin/env python3
"""Build, export and record graphfuse's bundled example models.

    python3 models/export.py

For each model (llama_tiny, gpt2_tiny, mlp) this script

  1. builds the PyTorch module from a fixed seed (fp32, CPU);
  2. exports it twice, with the TorchScript-based exporter
     (torch.onnx.export(..., dynamo=False), opset 17) and with the dynamo
     exporter (torch.onnx.export(..., dynamo=True), the opset it picks),
     each with dynamic batch / sequence axes;
  3. writes the ONNX backend-test layout next to each model.onnx:
     test_data_set_0/input_<i>.pb and output_<i>.pb, named and ordered like the
     graph inputs / outputs, the outputs computed by PyTorch eager;
  4. checks that onnxruntime reproduces the eager outputs on the exported file
     (rtol 1e-5, atol 1e-6) and fails loudly if it does not;
  5. records every initializer of the exported file and the PyTorch parameter or
     buffer it came from (initializers.txt), and the op histogram (ops.txt);
  6. records training references: 20 steps of SGD and of AdamW from the initial
     weights on 4 fixed batches (train_data/test_data_set_0..3), loss per step in
     train_sgd.csv / train_adamw.csv;
  7. rewrites models/README.md with sizes, versions, op histograms and notes.

The script is deterministic (fixed seeds, one thread, deterministic algorithms)
and idempotent: it deletes and rewrites models/<model>/ and models/README.md.
Nothing else in the repository is touched.  Tests of the C code never run this
script; they read the files it writes.
"""

import collections
import io
import math
import os
import platform
import shutil
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnx
import onnx.numpy_helper
import onnxruntime
import onnxscript

HERE = os.path.dirname(os.path.abspath(__file__))

RTOL = 1e-5
ATOL = 1e-6

LEGACY_OPSET = 17

# --------------------------------------------------------------------------
# Character-level tokenization shared by llama_tiny and gpt2_tiny.
# One token per byte; ids are a fixed table (not the byte value: the vocab has
# 64 entries).  A training sequence is <bos> word \n word \n ... ; padding
# positions have input id <pad> and label -100.
# --------------------------------------------------------------------------

VOCAB_SIZE = 64
PAD_ID, BOS_ID, EOW_ID, UNK_ID, APOS_ID = 0, 1, 2, 3, 4
IGNORE_INDEX = -100


def build_vocab():
    """id -> printable description, for README and for byte_to_id."""
    table = {PAD_ID: "`<pad>`", BOS_ID: "`<bos>`", EOW_ID: "`\\n` (newline, end of word)",
             UNK_ID: "`<unk>` (any other byte)", APOS_ID: "'"}
    for i, c in enumerate("abcdefghijklmnopqrstuvwxyz"):
        table[5 + i] = c
    for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZ"):
        table[31 + i] = c
    for i in range(57, VOCAB_SIZE):
        table[i] = "<reserved>"
    return table


def byte_to_id(b):
    if b == ord("\n"):
        return EOW_ID
    if b == ord("'"):
        return APOS_ID
    if ord("a") <= b <= ord("z"):
        return 5 + b - ord("a")
    if ord("A") <= b <= ord("Z"):
        return 31 + b - ord("A")
    return UNK_ID


def encode_words(words):
    """<bos> w o r d \\n w o r d \\n ...  as a list of ids."""
    ids = [BOS_ID]
    for w in words:
        ids += [byte_to_id(b) for b in (w + "\n").encode("utf-8")]
    return ids


# A fixed word list (the build machine has no /usr/share/dict/words, and the
# recorded data must not depend on it).  Includes apostrophes, capitals and one
# non-ASCII word so that <unk> appears.
WORDS = """
apple banana cherry dog elephant forest garden harbor island jungle kettle
lemon mountain night ocean pepper quartz river sunset tiger umbrella valley
window yellow zebra can't don't it's o'clock Boston Paris London Monday
August graph fuse kernel tensor matrix vector gradient loss train model
layer token embed rotary norm weight bias softmax gelu silu swish attention
head query key value cache batch sequence epoch learn rate moment adam
decay step clock brick stone cloud rain snow wind storm thunder light dark
café water fire earth metal wood paper glass sugar salt bread butter honey
""".split()


def lm_batch(rng, batch, seq, pad_last_row=0):
    """input_ids, labels (int64 [batch, seq]) from words drawn with rng.

    Each row is <bos> followed by whole words until seq tokens are filled (the
    last word is cut).  When pad_last_row > 0 the last row keeps only
    seq - pad_last_row real tokens; the rest is <pad> with label -100, which
    exercises ignore_index."""
    ids = np.full((batch, seq), PAD_ID, dtype=np.int64)
    labels = np.full((batch, seq), IGNORE_INDEX, dtype=np.int64)
    for r in range(batch):
        toks = [BOS_ID]
        while len(toks) < seq:
            toks += encode_words([WORDS[rng.integers(len(WORDS))]])[1:]
        n = seq - (pad_last_row if r == batch - 1 else 0)
        ids[r, :n] = toks[:n]
        labels[r, :n] = toks[:n]
    return ids, labels


# --------------------------------------------------------------------------
# Causal-LM loss, Hugging Face style.
# --------------------------------------------------------------------------

def causal_lm_loss(logits, labels):
    """logits [B, S, V], labels [B, S] -> scalar mean CE over shifted tokens."""
    shift_logits = logits[:, :-1, :].contiguous()
    shift_labels = labels[:, 1:].contiguous()
    return F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)),
                           shift_labels.view(-1), ignore_index=IGNORE_INDEX,
                           reduction="mean")


# --------------------------------------------------------------------------
# llama_tiny
# --------------------------------------------------------------------------

LLAMA = dict(vocab=VOCAB_SIZE, hidden=64, layers=2, heads=4, intermediate=128,
             max_seq=64, rope_theta=10000.0, eps=1e-6)


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    """cos/sin [B, S, head_dim] from position ids, as transformers does."""

    def __init__(self, head_dim, theta):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads = c["heads"]
        self.head_dim = c["hidden"] // c["heads"]
        self.scaling = self.head_dim ** -0.5
        h = c["hidden"]
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, h, bias=False)
        self.v_proj = nn.Linear(h, h, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        shape = (b, s, self.heads, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)      # [B, H, S, D]
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        w = torch.matmul(q, k.transpose(2, 3)) * self.scaling   # [B, H, S, S]
        w = w + mask                                            # additive 0 / min
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(w, v).transpose(1, 2).contiguous()     # [B, S, H, D]
        return self.o_proj(o.reshape(b, s, -1))


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["hidden"], c["intermediate"], bias=False)
        self.up_proj = nn.Linear(c["hidden"], c["intermediate"], bias=False)
        self.down_proj = nn.Linear(c["intermediate"], c["hidden"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(c["hidden"], c["eps"])
        self.self_attn = LlamaAttention(c)
        self.post_attention_layernorm = LlamaRMSNorm(c["hidden"], c["eps"])
        self.mlp = LlamaMLP(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaTiny(nn.Module):
    def __init__(self, c=LLAMA):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(c) for _ in range(c["layers"]))
        self.norm = LlamaRMSNorm(c["hidden"], c["eps"])
        self.rotary_emb = LlamaRotaryEmbedding(c["hidden"] // c["heads"], c["rope_theta"])
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)

    def forward(self, input_ids, labels):
        b, s = input_ids.shape
        x = self.embed_tokens(input_ids)                              # [B, S, C]
        position_ids = torch.arange(s, device=x.device).unsqueeze(0)  # [1, S]
        cos, sin = self.rotary_emb(x, position_ids)                   # [1, S, D]
        allowed = position_ids[0][None, :] <= position_ids[0][:, None]  # [S, S]
        mask = torch.where(allowed, 0.0, torch.finfo(x.dtype).min)    # additive
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))                           # [B, S, V]
        return logits, causal_lm_loss(logits, labels)


# --------------------------------------------------------------------------
# gpt2_tiny
# --------------------------------------------------------------------------

GPT2 = dict(vocab=VOCAB_SIZE, hidden=64, layers=2, heads=4, max_seq=64, eps=1e-5)


def gelu_new(x):
    """transformers' NewGELUActivation (GPT-2's "gelu_new"), tanh approximation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads = c["heads"]
        self.head_dim = c["hidden"] // c["heads"]
        self.c_attn = nn.Linear(c["hidden"], 3 * c["hidden"])
        self.c_proj = nn.Linear(c["hidden"], c["hidden"])

    def forward(self, x, allowed):
        b, s, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        shape = (b, s, self.heads, self.head_dim)
        q = q.view(shape).transpose(1, 2)                           # [B, H, S, D]
        k = k.view(shape).transpose(1, 2)
        v = v.view(shape).transpose(1, 2)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        w = torch.where(allowed, w, torch.finfo(w.dtype).min)       # GPT-2 style mask
        w = F.softmax(w, dim=-1)
        o = torch.matmul(w, v).transpose(1, 2).contiguous()         # [B, S, H, D]
        return self.c_proj(o.reshape(b, s, c))


class GPT2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["hidden"], 4 * c["hidden"])
        self.c_proj = nn.Linear(4 * c["hidden"], c["hidden"])

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["hidden"], eps=c["eps"])
        self.attn = GPT2Attention(c)
        self.ln_2 = nn.LayerNorm(c["hidden"], eps=c["eps"])
        self.mlp = GPT2MLP(c)

    def forward(self, x, allowed):
        x = x + self.attn(self.ln_1(x), allowed)
        return x + self.mlp(self.ln_2(x))


class GPT2Tiny(nn.Module):
    def __init__(self, c=GPT2):
        super().__init__()
        self.wte = nn.Embedding(c["vocab"], c["hidden"])
        self.wpe = nn.Embedding(c["max_seq"], c["hidden"])
        self.h = nn.ModuleList(GPT2Block(c) for _ in range(c["layers"]))
        self.ln_f = nn.LayerNorm(c["hidden"], eps=c["eps"])
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
        self.lm_head.weight = self.wte.weight                    # tied

    def forward(self, input_ids, labels):
        b, s = input_ids.shape
        pos = torch.arange(s, device=input_ids.device)             # [S]
        x = self.wte(input_ids) + self.wpe(pos)                    # [B, S, C]
        allowed = (pos[None, :] <= pos[:, None])[None, None]       # [1, 1, S, S]
        for block in self.h:
            x = block(x, allowed)
        logits = self.lm_head(self.ln_f(x))                        # [B, S, V]
        return logits, causal_lm_loss(logits, labels)


# --------------------------------------------------------------------------
# mlp
# --------------------------------------------------------------------------

MLP = dict(inputs=32, hidden=64, classes=10)


class MLPClassifier(nn.Module):
    def __init__(self, c=MLP):
        super().__init__()
        self.fc1 = nn.Linear(c["inputs"], c["hidden"])
        self.fc2 = nn.Linear(c["hidden"], c["hidden"])
        self.fc3 = nn.Linear(c["hidden"], c["classes"])

    def forward(self, x, labels):
        h = F.relu(self.fc1(x))
        h = F.relu(self.fc2(h))
        logits = self.fc3(h)
        return logits, F.cross_entropy(logits, labels)


# --------------------------------------------------------------------------
# Initialization.  Default PyTorch inits leave norm weights at 1 and (for
# GPT-2 style inits) biases at 0, which would let a kernel that ignores them
# pass the recorded tests.  So every parameter is drawn from a seeded
# distribution: matrices N(0, 1/fan_in), norm weights 1 + N(0, 0.1^2),
# biases N(0, 0.05^2), embeddings N(0, 0.5^2) (wte of GPT-2, tied to the
# head: N(0, 0.1^2)).
# --------------------------------------------------------------------------

def init_lm(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
            elif p.dim() == 1:
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)
            elif name == "wte.weight":                    # tied to the lm head
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif "embed" in name or name == "wpe.weight":
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    return model


def make_model(name):
    torch.manual_seed(0)
    if name == "llama_tiny":
        return init_lm(LlamaTiny(), 1).eval()
    if name == "gpt2_tiny":
        return init_lm(GPT2Tiny(), 2).eval()
    if name == "mlp":
        torch.manual_seed(3)
        return MLPClassifier().eval()           # default nn.Linear init
    raise ValueError(name)


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

def mlp_batch(rng, batch):
    """x [batch, 32] ~ N(0,1); labels = argmax of a fixed random projection
    (learnable, so the training curves go down)."""
    proj = np.random.default_rng(1234).standard_normal((MLP["inputs"], MLP["classes"]))
    x = rng.standard_normal((batch, MLP["inputs"])).astype(np.float32)
    labels = np.argmax(x @ proj, axis=1).astype(np.int64)
    return x, labels


def test_inputs(name):
    rng = np.random.default_rng({"llama_tiny": 10, "gpt2_tiny": 20, "mlp": 30}[name])
    if name == "mlp":
        return mlp_batch(rng, 8)
    return lm_batch(rng, batch=2, seq=16, pad_last_row=3)


def train_batches(name):
    rng = np.random.default_rng({"llama_tiny": 11, "gpt2_tiny": 21, "mlp": 31}[name])
    if name == "mlp":
        return [mlp_batch(rng, 16) for _ in range(4)]
    return [lm_batch(rng, batch=4, seq=32, pad_last_row=5 if i % 2 else 0)
            for i in range(4)]


INPUT_NAMES = {"llama_tiny": ["input_ids", "labels"],
               "gpt2_tiny": ["input_ids", "labels"],
               "mlp": ["x", "labels"]}
OUTPUT_NAMES = ["logits", "loss"]


# --------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------

def export_legacy(model, args, path, name):
    if name == "mlp":
        dyn = {"x": {0: "batch"}, "labels": {0: "batch"}, "logits": {0: "batch"}}
    else:
        dyn = {"input_ids": {0: "batch", 1: "seq"}, "labels": {0: "batch", 1: "seq"},
               "logits": {0: "batch", 1: "seq"}}
    torch.onnx.export(model, args, path, dynamo=False, opset_version=LEGACY_OPSET,
                      input_names=INPUT_NAMES[name], output_names=OUTPUT_NAMES,
                      dynamic_axes=dyn)


def export_dynamo(model, args, path, name):
    batch = torch.export.Dim("batch", min=1, max=1024)
    if name == "mlp":
        dyn = {"x": {0: batch}, "labels": {0: batch}}
    else:
        seq = torch.export.Dim("seq", min=2, max=64)
        dyn = {"input_ids": {0: batch, 1: seq}, "labels": {0: batch, 1: seq}}
    prog = torch.onnx.export(model, args, dynamo=True, dynamic_shapes=dyn,
                             input_names=INPUT_NAMES[name], output_names=OUTPUT_NAMES,
                             external_data=False)
    prog.save(path, external_data=False)
    relativize_paths(path)


def relativize_paths(path):
    """The dynamo exporter stores each node's Python stack trace in
    metadata_props ("pkg.torch.onnx.stack_trace"), with absolute file names.
    Make them relative to the repository root so that the committed files do
    not depend on where the repository was checked out.  Nothing else is
    changed."""
    m = onnx.load(path)
    prefix = os.path.dirname(HERE) + os.sep
    holders = [m, m.graph] + list(m.graph.node) + list(m.graph.value_info) \
        + list(m.graph.input) + list(m.graph.output) + list(m.graph.initializer)
    for fn in m.functions:
        holders += [fn] + list(fn.node)
    for h in holders:
        for p in h.metadata_props:
            p.value = p.value.replace(prefix, "")
    onnx.save(m, path)


EXPORTERS = {"legacy": export_legacy, "dynamo": export_dynamo}


# --------------------------------------------------------------------------
# Recording helpers
# --------------------------------------------------------------------------

def write_pb(path, array, name):
    t = onnx.numpy_helper.from_array(np.array(array, order="C"), name)   # keeps 0-d shape
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def write_data_set(folder, names, arrays):
    os.makedirs(folder, exist_ok=True)
    for i, (n, a) in enumerate(zip(names, arrays)):
        write_pb(os.path.join(folder, f"input_{i}.pb"), a, n)


def eager(model, inputs):
    with torch.no_grad():
        outs = model(*[torch.from_numpy(a) for a in inputs])
    return [o.detach().numpy() for o in outs]


def ort_run(path, feeds, optimize=False):
    """Run onnxruntime (CPU, one thread); graph optimizations off by default so
    that the file itself, not ORT's fused rewrite of it, is what gets checked."""
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = (onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(None, feeds)


def compare(ref, got):
    """max abs error, max rel error, and whether allclose(rtol, atol) holds."""
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if ref.shape != got.shape:
        raise SystemExit(f"shape mismatch: reference {ref.shape} vs onnxruntime {got.shape}")
    d = np.abs(ref - got)
    rel = d / np.maximum(np.abs(ref), 1e-30)
    ok = bool(np.all(d <= ATOL + RTOL * np.abs(ref)))
    return float(d.max()), float(rel.max()), ok


def op_histogram(m):
    """Counts of domain::op_type over the main graph, subgraphs and functions."""
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
    fhist = collections.Counter()
    for fn in m.functions:
        for n in fn.node:
            fhist[n.op_type] += 1
    return hist, fhist


def param_table(model):
    """name -> numpy array for every parameter (tied ones once) and buffer."""
    out = {}
    seen = set()
    for n, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        out[n] = ("param", p.detach().numpy())
    for n, b in model.named_buffers():
        out[n] = ("buffer", b.detach().numpy())
    return out


def tied_aliases(model):
    """param name -> other names sharing the same tensor."""
    groups = collections.defaultdict(list)
    for n, p in model.named_parameters(remove_duplicate=False):
        groups[id(p)].append(n)
    return {v[0]: v[1:] for v in groups.values() if len(v) > 1}


def match_source(a, params):
    """(torch name, kind, layout) of the parameter/buffer whose values array a
    holds, or None.  layout: same | transposed | reshaped."""
    for pn, (pk, pv) in params.items():
        if pv.size <= 1 or pv.dtype != a.dtype:
            continue
        if pv.shape == a.shape and np.array_equal(pv, a):
            return pn, pk, "same"
        if pv.ndim == 2 and pv.T.shape == a.shape and np.array_equal(pv.T, a):
            return pn, pk, "transposed"
        if pv.size == a.size and np.array_equal(pv.ravel(), a.ravel()):
            return pn, pk, "reshaped"
    return None


def classify_initializers(m, model):
    """For each initializer: which torch parameter/buffer it holds and how.

    layout is 'same' (identical values), 'transposed' (the exporter folded a
    Transpose of the weight into a new initializer), 'reshaped' (same values,
    other shape: a folded view of a buffer) or '-' for a 'constant' (not a
    torch tensor: shapes, axes, scalars)."""
    params = param_table(model)
    aliases = tied_aliases(model)
    rows = []
    for init in m.graph.initializer:
        a = onnx.numpy_helper.to_array(init)
        src, kind, layout = "-", "constant", "-"
        if init.name in params and params[init.name][1].shape == a.shape \
                and np.array_equal(params[init.name][1], a):
            src, kind, layout = init.name, params[init.name][0], "same"
        else:
            found = match_source(a, params)
            if found:
                src, kind, layout = found
        if src in aliases:
            src = src + "=" + "=".join(aliases[src])
        dims = "x".join(str(d) for d in a.shape) if a.ndim else "scalar"
        rows.append((init.name, str(a.dtype), dims, kind, src, layout))
    return rows


def constant_sources(m, model):
    """Constant nodes that hold a torch parameter or buffer (folded into the
    graph instead of stored as an initializer)."""
    params = param_table(model)
    out = []
    for n in m.graph.node:
        if n.op_type != "Constant":
            continue
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                arr = onnx.numpy_helper.to_array(a.t)
                found = match_source(arr, params)
                if found:
                    out.append((n.output[0], "x".join(map(str, arr.shape))) + found)
    return out


def constant_nodes(m):
    """Constant nodes holding more than 16 values (folded tensors)."""
    out = []
    for n in m.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    arr = onnx.numpy_helper.to_array(a.t)
                    if arr.size > 16:
                        out.append((n.output[0], str(arr.dtype), "x".join(map(str, arr.shape))))
    return out


# --------------------------------------------------------------------------
# Export + verification of one (model, exporter)
# --------------------------------------------------------------------------

def export_one(name, exporter, model, inputs, ref, summary):
    folder = os.path.join(HERE, name, exporter)
    os.makedirs(folder)
    path = os.path.join(folder, "model.onnx")
    args = tuple(torch.from_numpy(a) for a in inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        EXPORTERS[exporter](model, args, path, name)

    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    in_names = [i.name for i in m.graph.input]
    out_names = [o.name for o in m.graph.output]
    if in_names != INPUT_NAMES[name] or out_names != OUTPUT_NAMES:
        raise SystemExit(f"{name}/{exporter}: graph inputs {in_names}, outputs {out_names}")

    # test data, named as the graph's inputs/outputs, in graph order
    ds = os.path.join(folder, "test_data_set_0")
    write_data_set(ds, in_names, inputs)
    for i, (n, a) in enumerate(zip(out_names, ref)):
        write_pb(os.path.join(ds, f"output_{i}.pb"), a, n)

    # onnxruntime must reproduce eager on this file: on the test data (graph
    # optimizations off, then on) and on other shapes (dynamic axes)
    feeds = dict(zip(in_names, inputs))
    errs = {}
    for optimize in (False, True):
        ort_names, got = ort_run(path, feeds, optimize)
        for n, r, g in zip(ort_names, ref, got):
            amax, rmax, ok = compare(r, g)
            old = errs.get(n, (0.0, 0.0))
            errs[n] = (max(old[0], amax), max(old[1], rmax))
            print(f"  {name:10s} {exporter:6s} ort-opt={int(optimize)} {n:6s} max abs err {amax:.3e}"
                  f"  max rel err {rmax:.3e}  {'ok' if ok else 'FAIL'}")
            if not ok:
                raise SystemExit(f"{name}/{exporter}: onnxruntime differs from PyTorch eager on "
                                 f"{n} beyond rtol {RTOL} / atol {ATOL}")
    dyn_err = 0.0
    for other in other_shape_inputs(name):
        ref2 = eager(model, other)
        _, got2 = ort_run(path, dict(zip(in_names, other)))
        for r, g in zip(ref2, got2):
            amax, _, ok = compare(r, g)
            dyn_err = max(dyn_err, amax)
            if not ok:
                raise SystemExit(f"{name}/{exporter}: wrong result for input shape {other[0].shape}")
        print(f"  {name:10s} {exporter:6s} shape {str(other[0].shape):8s} max abs err "
              f"{max(compare(r, g)[0] for r, g in zip(ref2, got2)):.3e}  ok")

    hist, fhist = op_histogram(m)
    inits = classify_initializers(m, model)
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

    def dims(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    summary[(name, exporter)] = dict(
        ir_version=m.ir_version,
        opsets={o.domain or "ai.onnx": o.version for o in m.opset_import},
        producer=f"{m.producer_name} {m.producer_version}",
        functions=[f"{fn.domain}::{fn.name}" for fn in m.functions],
        function_ops=dict(fhist),
        nodes=sum(hist.values()),
        hist=dict(hist),
        inits=inits,
        big_constants=constant_nodes(m),
        constant_sources=constant_sources(m, model),
        inputs=[(i.name, dims(i)) for i in m.graph.input],
        outputs=[(o.name, dims(o)) for o in m.graph.output],
        errs=errs,
        dyn_err=dyn_err,
        size=os.path.getsize(path),
    )


def other_shape_inputs(name):
    """Shapes other than the exported example, to check the dynamic axes."""
    rng = np.random.default_rng(99)
    if name == "mlp":
        return [mlp_batch(rng, 3), mlp_batch(rng, 1)]
    return [lm_batch(rng, batch=3, seq=7, pad_last_row=2),
            lm_batch(rng, batch=1, seq=LLAMA["max_seq"])]


# --------------------------------------------------------------------------
# Training references
# --------------------------------------------------------------------------

SGD_HP = dict(lr=0.1, momentum=0.9)
ADAMW_HP = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
TRAIN_STEPS = 20


def train(name, make_opt, batches):
    model = make_model(name).train()
    opt = make_opt(model.parameters())
    losses = []
    for step in range(TRAIN_STEPS):
        a, b = batches[step % len(batches)]
        opt.zero_grad(set_to_none=True)
        _, loss = model(torch.from_numpy(a), torch.from_numpy(b))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise SystemExit(f"{name}: training diverged at step {step}")
    return losses


def record_training(name, summary):
    batches = train_batches(name)
    for i, arrays in enumerate(batches):
        write_data_set(os.path.join(HERE, name, "train_data", f"test_data_set_{i}"),
                       INPUT_NAMES[name], arrays)
    runs = {"sgd": lambda p: torch.optim.SGD(p, **SGD_HP),
            "adamw": lambda p: torch.optim.AdamW(p, **ADAMW_HP)}
    for opt_name, make_opt in runs.items():
        losses = train(name, make_opt, batches)
        with open(os.path.join(HERE, name, f"train_{opt_name}.csv"), "w") as f:
            f.write("step,loss\n")
            for s, l in enumerate(losses):
                f.write(f"{s},{l:.9g}\n")
        summary[(name, "train_" + opt_name)] = losses
        print(f"  {name:10s} {opt_name:6s} loss {losses[0]:.4f} -> {losses[-1]:.4f}")

    # step 0 runs on the initial weights: the exported files must give that loss
    for exporter in EXPORTERS:
        path = os.path.join(HERE, name, exporter, "model.onnx")
        _, got = ort_run(path, dict(zip(INPUT_NAMES[name], batches[0])))
        first = summary[(name, "train_sgd")][0]
        if not abs(float(got[1]) - first) <= ATOL + RTOL * abs(first):
            raise SystemExit(f"{name}/{exporter}: onnxruntime loss {float(got[1])} on train "
                             f"batch 0 differs from the recorded step-0 loss {first}")


# --------------------------------------------------------------------------
# README
# --------------------------------------------------------------------------

MODELS = ["llama_tiny", "gpt2_tiny", "mlp"]


def tree_sizes():
    rows = []
    total = 0
    for name in MODELS:
        for root, dirs, files in os.walk(os.path.join(HERE, name)):
            dirs.sort()
            for fn in sorted(files):
                p = os.path.join(root, fn)
                sz = os.path.getsize(p)
                total += sz
                rows.append((os.path.relpath(p, HERE), sz))
    return rows, total


def versions():
    return [("python", platform.python_version()), ("torch", torch.__version__),
            ("onnx", onnx.__version__), ("onnxruntime", onnxruntime.__version__),
            ("onnxscript", onnxscript.__version__), ("numpy", np.__version__)]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def write_readme(summary):
    out = io.StringIO()
    w = lambda s="": out.write(s + "\n")
    vocab = build_vocab()
    sizes = {n: n_params(make_model(n)) for n in MODELS}

    w("# models/ — bundled example models and reference numbers")
    w()
    w("Everything in this folder except `export.py` is generated by `export.py`; edit the")
    w("script, not the outputs.  **This README is generated too.**")
    w()
    w("## Regenerate")
    w()
    w("```")
    w("pip install torch onnx onnxruntime onnxscript")
    w("python3 models/export.py")
    w("```")
    w()
    w("The script deletes and rewrites `models/<model>/` for every model and this README.")
    w("It is deterministic (fixed seeds, one thread, `torch.use_deterministic_algorithms`).")
    w("Versions used for the committed files:")
    w()
    w("| package | version |")
    w("| --- | --- |")
    for k, v in versions():
        w(f"| {k} | {v} |")
    w()
    w("Different torch / onnxscript versions produce different graphs (node names,")
    w("decompositions, folding); the numbers in `test_data_set_*` are PyTorch eager")
    w("outputs, so they only change if the model code, the seeds or PyTorch's CPU math change.")
    w()
    w("## Layout")
    w()
    w("```")
    w("models/<model>/<exporter>/model.onnx                 exporter = legacy | dynamo")
    w("models/<model>/<exporter>/test_data_set_0/input_<i>.pb   graph inputs, graph order")
    w("models/<model>/<exporter>/test_data_set_0/output_<i>.pb  PyTorch eager outputs")
    w("models/<model>/<exporter>/initializers.txt           every initializer and its torch source")
    w("models/<model>/<exporter>/ops.txt                    op histogram of the file")
    w("models/<model>/train_data/test_data_set_<k>/input_<i>.pb  training batches k = 0..3")
    w("models/<model>/train_sgd.csv, train_adamw.csv       step,loss reference curves")
    w("```")
    w()
    w("Each `.pb` file is a serialized `onnx.TensorProto` (`onnx.numpy_helper.from_array`)")
    w("whose `name` is the graph input / output name, as in the ONNX backend node tests.")
    w("The test data of `legacy/` and `dynamo/` are identical (same inputs, same eager")
    w("outputs); both files are checked against them with onnxruntime at")
    w(f"rtol {RTOL:g} / atol {ATOL:g} (elementwise `|ort - ref| <= atol + rtol*|ref|`, as")
    w("`numpy.allclose`), with onnxruntime's graph optimizations off and on, when the")
    w("script runs; and on two more input shapes (batch 3 seq 7, batch 1 seq 64; mlp batch")
    w("3 and 1) to check the dynamic axes.  Logit errors are ~1e-6 absolute; relative")
    w("errors reach a few 1e-3 only on logits close to 0.")
    w()
    w("`initializers.txt` columns: ONNX name, dtype, shape, kind (`param` = trainable")
    w("torch parameter, `buffer` = torch buffer, `constant` = anything else the exporter")
    w("stored as an initializer), torch name (tied parameters are written `a=b`), layout")
    w("(`same` = the parameter's values as is, `transposed` = the exporter folded a")
    w("`Transpose` of the parameter into a new initializer, `reshaped` = same values in")
    w("another shape, e.g. a buffer stored as `x[None, :, None]`).  A trainer must update the")
    w("`param` rows only; a `transposed` row is the same parameter (SGD and AdamW are")
    w("elementwise, so updating the transposed copy is equivalent), but when two rows")
    w("come from one torch parameter (tied weights) their gradients must be summed and")
    w("both copies updated together.")
    w()
    w("## Models")
    w()
    w(f"### llama_tiny ({sizes['llama_tiny']} parameters)")
    w()
    w(f"Llama-style decoder (code follows transformers' `modeling_llama` eager path):")
    w(f"vocab {LLAMA['vocab']}, hidden {LLAMA['hidden']}, {LLAMA['layers']} layers, "
      f"{LLAMA['heads']} heads (head dim {LLAMA['hidden'] // LLAMA['heads']}), "
      f"intermediate {LLAMA['intermediate']}, max seq {LLAMA['max_seq']}.")
    w()
    w(f"- token embedding `embed_tokens` (no position embedding);")
    w(f"- per layer: RMSNorm (weight, eps {LLAMA['eps']:g}; `x.pow(2).mean(-1, keepdim=True)`,")
    w(f"  `x * torch.rsqrt(var + eps)`, `weight * x`) → causal self-attention (q/k/v/o")
    w(f"  projections without bias; RoPE θ = {LLAMA['rope_theta']:g} in the rotate_half form,")
    w(f"  `q*cos + rotate_half(q)*sin` with `rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2])`;")
    w(f"  cos/sin computed inside the model from `position_ids = arange(seq)` and the")
    w(f"  `inv_freq` buffer, as transformers' `LlamaRotaryEmbedding` does; scores scaled by")
    w(f"  `head_dim**-0.5`, an additive mask `where(j <= i, 0, finfo.min)`, softmax) →")
    w(f"  residual → RMSNorm → SwiGLU MLP `down(silu(gate(x)) * up(x))`, no biases → residual;")
    w(f"- final RMSNorm, untied `lm_head` (no bias);")
    w(f"- loss: `cross_entropy(logits[:, :-1].view(-1, V), labels[:, 1:].view(-1),")
    w(f"  ignore_index=-100)`, mean over the non-ignored tokens (transformers' causal-LM loss).")
    w()
    w(f"### gpt2_tiny ({sizes['gpt2_tiny']} parameters)")
    w()
    w(f"GPT-2 style decoder: vocab {GPT2['vocab']}, hidden {GPT2['hidden']}, {GPT2['layers']} layers, "
      f"{GPT2['heads']} heads, MLP {4 * GPT2['hidden']}, {GPT2['max_seq']} learned positions.")
    w()
    w(f"- `wte(input_ids) + wpe(arange(seq))`;")
    w(f"- per layer: pre-LayerNorm (weight and bias, eps {GPT2['eps']:g}) → attention with a fused")
    w(f"  biased QKV projection `c_attn` (nn.Linear {GPT2['hidden']}→{3 * GPT2['hidden']}, split in three),")
    w(f"  scores divided by `sqrt(head_dim)`, mask `where(j <= i, scores, finfo.min)` (GPT-2's")
    w(f"  form), softmax, biased output projection `c_proj` → residual → LayerNorm → MLP")
    w(f"  `c_proj(gelu_new(c_fc(x)))` (biased; `gelu_new` is transformers' NewGELUActivation:")
    w(f"  `0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x**3)))`) → residual;")
    w(f"- final LayerNorm `ln_f`, `lm_head` tied to `wte`;")
    w(f"- same causal-LM loss as llama_tiny.")
    w()
    w(f"Positions are learned for {GPT2['max_seq']} tokens: sequences longer than that are invalid")
    w(f"(the dynamo export declares seq ≤ 64).")
    w()
    w(f"### mlp ({sizes['mlp']} parameters)")
    w()
    w(f"Classifier: `x` float [batch, {MLP['inputs']}] → Linear({MLP['inputs']},{MLP['hidden']}) + ReLU →")
    w(f"Linear({MLP['hidden']},{MLP['hidden']}) + ReLU → Linear({MLP['hidden']},{MLP['classes']}) = `logits`;")
    w(f"`loss = cross_entropy(logits, labels)` (mean), `labels` int64 [batch].")
    w(f"Data: `x ~ N(0, 1)`, `labels = argmax(x @ P)` for a fixed random projection `P`")
    w(f"(numpy seed 1234), so the task is learnable.")
    w()
    w("### Initialization")
    w()
    w("llama_tiny and gpt2_tiny are initialized so that no parameter has a trivial value")
    w("(a kernel that ignores a bias or a norm weight must fail the tests): matrices")
    w("N(0, 1/fan_in), norm weights 1 + N(0, 0.1²), biases N(0, 0.05²), `embed_tokens` and")
    w("`wpe` N(0, 0.5²), the tied `wte` N(0, 0.1²).  mlp uses PyTorch's default nn.Linear")
    w("init (seed 3).  The initial weights are the initializers of each `model.onnx`.")
    w()
    w("## Inputs and outputs")
    w()
    w("| model | inputs | outputs | test data | train batches |")
    w("| --- | --- | --- | --- | --- |")
    w("| llama_tiny | `input_ids` int64 [batch, seq], `labels` int64 [batch, seq] | `logits` float [batch, seq, 64], `loss` float [] | batch 2, seq 16 | 4 × (batch 4, seq 32) |")
    w("| gpt2_tiny | `input_ids` int64 [batch, seq], `labels` int64 [batch, seq] | `logits` float [batch, seq, 64], `loss` float [] | batch 2, seq 16 | 4 × (batch 4, seq 32) |")
    w("| mlp | `x` float [batch, 32], `labels` int64 [batch] | `logits` float [batch, 10], `loss` float [] | batch 8 | 4 × batch 16 |")
    w()
    w("In the language-model test data the last row ends with 3 padding tokens (label -100);")
    w("in train batches 1 and 3 the last row ends with 5; so `ignore_index` is exercised.")
    w()
    w("## Tokenization (llama_tiny, gpt2_tiny)")
    w()
    w("Character level, one token per byte of the UTF-8 text, through this fixed table")
    w("(ids are not byte values: the vocabulary has 64 entries):")
    w()
    w("| id | token |")
    w("| --- | --- |")
    i = 0
    while i < VOCAB_SIZE:
        if vocab[i] == "<reserved>":
            w(f"| {i}–{VOCAB_SIZE - 1} | reserved, never produced (embedding rows exist) |")
            break
        if i == 5:
            w("| 5–30 | `a`–`z` (id = byte − 92) |")
            i = 31
            continue
        if i == 31:
            w("| 31–56 | `A`–`Z` (id = byte − 34) |")
            i = 57
            continue
        tok = vocab[i]
        w(f"| {i} | `{tok}` |" if len(tok) == 1 else f"| {i} | {tok} |")
        i += 1
    w()
    w("A word list (for example `/usr/share/dict/words`, one word per line) is encoded as")
    w("`<bos>` followed by the bytes of each word and its newline: `<bos> c a t \\n d o g \\n …`.")
    w("Every byte outside `a-z`, `A-Z`, `'`, `\\n` (digits, `é`'s two UTF-8 bytes, …) becomes")
    w("`<unk>`.  A training row is cut to `seq` tokens; a short row is filled with `<pad>`")
    w("(id 0) and its labels with -100.  `labels` equal `input_ids` elsewhere — the model")
    w("shifts them itself (`logits[:, :-1]` predicts `labels[:, 1:]`).  The recorded")
    w("batches use a fixed word list in `export.py` (the build machine had no")
    w("`/usr/share/dict/words`), so they do not depend on the host's dictionary.")
    w()
    w("## Training references")
    w()
    w(f"For each model, two runs of {TRAIN_STEPS} steps from the initial weights (the ones in")
    w("`model.onnx`), model in train mode (no dropout anywhere, so the same function),")
    w("batches `train_data/test_data_set_{step % 4}`, one batch per step:")
    w()
    w("```python")
    w("opt.zero_grad(); logits, loss = model(*batch); loss.backward(); opt.step()")
    w("```")
    w()
    w("`train_<opt>.csv` has the header `step,loss`; `loss` is the loss of that step,")
    w("computed before the update (what a PyTorch loop prints), printed with 9 significant digits.")
    w()
    w("| file | optimizer | hyperparameters |")
    w("| --- | --- | --- |")
    w(f"| train_sgd.csv | torch.optim.SGD | lr {SGD_HP['lr']}, momentum {SGD_HP['momentum']}, dampening 0, nesterov False, weight_decay 0 |")
    w(f"| train_adamw.csv | torch.optim.AdamW | lr {ADAMW_HP['lr']:g}, betas {ADAMW_HP['betas']}, eps {ADAMW_HP['eps']:g}, weight_decay {ADAMW_HP['weight_decay']}, amsgrad False |")
    w()
    w("PyTorch details to reproduce: SGD momentum buffer starts as the first gradient")
    w("(`buf = g` at step 1, then `buf = 0.9*buf + g`, `p -= lr*buf`); AdamW decays")
    w("first (`p *= 1 - lr*wd`) then applies the bias-corrected Adam step")
    w("`p -= lr/(1-β1^t) * m / (sqrt(v)/sqrt(1-β2^t) + eps)`.  Weight decay applies")
    w("to every parameter (norm weights and biases included: one param group).")
    w("Tied `wte`/`lm_head` in gpt2_tiny is one parameter (gradient summed over its two uses).")
    w()
    w("| model | SGD step 0 → 19 | AdamW step 0 → 19 |")
    w("| --- | --- | --- |")
    for n in MODELS:
        s, a = summary[(n, "train_sgd")], summary[(n, "train_adamw")]
        w(f"| {n} | {s[0]:.4f} → {s[-1]:.4f} | {a[0]:.4f} → {a[-1]:.4f} |")
    w()

    w("## Exported files")
    w()
    w("| model | exporter | opset | IR | nodes | functions | size | max abs err logits / loss (ORT vs eager, test data) |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in MODELS:
        for e in EXPORTERS:
            s = summary[(n, e)]
            ops = ", ".join(f"{k} {v}" for k, v in sorted(s["opsets"].items()))
            fns = len(s["functions"])
            w(f"| {n} | {e} | {ops} | {s['ir_version']} | {s['nodes']} | {fns} | "
              f"{s['size'] / 1024:.1f} KiB | {s['errs']['logits'][0]:.2e} / {s['errs']['loss'][0]:.2e} |")
    w()
    w("Legacy = `torch.onnx.export(..., dynamo=False, opset_version=17, dynamic_axes=...)`")
    w("(TorchScript exporter, default `do_constant_folding=True`).  Dynamo =")
    w("`torch.onnx.export(..., dynamo=True, dynamic_shapes=..., external_data=False)`")
    w("(default `optimize=True`, default opset).  Both with dynamic batch (and seq) axes:")
    w()
    for n in MODELS:
        for e in EXPORTERS:
            s = summary[(n, e)]
            ins = ", ".join(f"`{a}` {b}" for a, b in s["inputs"])
            outs = ", ".join(f"`{a}` {b}" for a, b in s["outputs"])
            w(f"- {n}/{e}: inputs {ins}; outputs {outs}")
    w()

    w("### Op histograms")
    w()
    for n in MODELS:
        w(f"#### {n}")
        w()
        ops = sorted(set(summary[(n, "legacy")]["hist"]) | set(summary[(n, "dynamo")]["hist"]))
        w("| op | legacy | dynamo |")
        w("| --- | ---: | ---: |")
        for op in ops:
            a = summary[(n, "legacy")]["hist"].get(op, 0)
            b = summary[(n, "dynamo")]["hist"].get(op, 0)
            w(f"| {op} | {a or '–'} | {b or '–'} |")
        w(f"| **total** | {summary[(n, 'legacy')]['nodes']} | {summary[(n, 'dynamo')]['nodes']} |")
        w()

    w("### Initializers")
    w()
    for n in MODELS:
        for e in EXPORTERS:
            s = summary[(n, e)]
            kinds = collections.Counter((r[3], r[5]) for r in s["inits"])
            desc = ", ".join(f"{v} {k[0]}" + (f" ({k[1]})" if k[1] not in ("-", "same") else "")
                             for k, v in sorted(kinds.items()))
            w(f"- {n}/{e}: {len(s['inits'])} initializers — {desc}")
            renamed = [r for r in s["inits"] if r[3] != "constant" and r[0] not in r[4].split("=")]
            if renamed:
                w(f"  - not under their torch name: " + ", ".join(
                    f"`{r[0]}` = {r[4]}{' (transposed)' if r[5] == 'transposed' else ''}" for r in renamed))
            for c in s["constant_sources"]:
                w(f"  - {c[3]} `{c[2]}` is not an initializer: it is folded into the `Constant` node "
                  f"`{c[0]}` [{c[1]}] ({c[4]})")
            for r in s["inits"]:
                if r[3] == "buffer":
                    w(f"  - {r[3]} `{r[4]}` is the initializer `{r[0]}` [{r[2]}] ({r[5]})")
            if s["big_constants"]:
                w(f"  - large `Constant` nodes: " + ", ".join(
                    f"`{c[0]}` {c[1]} [{c[2]}]" for c in s["big_constants"]))
    w()
    w(NOTES_MARKER)
    w()
    w("## Files and sizes")
    w()
    rows, total = tree_sizes()
    w("```")
    for p, sz in rows:
        w(f"{sz:>9}  {p}")
    w(f"{total:>9}  total (models/<model>/ only)")
    w("```")

    text = out.getvalue().replace(NOTES_MARKER, notes(summary))
    with open(os.path.join(HERE, "README.md"), "w") as f:
        f.write(text)


NOTES_MARKER = "@@NOTES@@"


def notes(summary):
    """Observations about what each exporter produced.  Written by reading the
    graphs made with the versions listed at the top of this README; the
    numbers (opset, IR, counts) are filled in from the files themselves."""
    L, D = summary[("llama_tiny", "legacy")], summary[("llama_tiny", "dynamo")]
    fn_text = ("no local functions" if not any(summary[(n, "dynamo")]["functions"] for n in MODELS)
               else "local functions: " + ", ".join(
                   f for n in MODELS for f in summary[(n, "dynamo")]["functions"]))
    return NOTES.format(
        legacy_ir=L["ir_version"], dynamo_ir=D["ir_version"],
        legacy_opset=L["opsets"]["ai.onnx"], dynamo_opset=D["opsets"]["ai.onnx"],
        dynamo_functions=fn_text,
        legacy_nodes=L["nodes"], dynamo_nodes=D["nodes"],
        legacy_constants=L["hist"].get("Constant", 0))


NOTES = """## How the exporters differ (read this before writing a fusion pattern)

General:

- **Legacy**: IR version {legacy_ir}, opset {legacy_opset}; no `value_info` (no intermediate
  shapes); every scalar / shape constant is a `Constant` node ({legacy_constants} of the
  {legacy_nodes} nodes of llama_tiny); value names like `/layers.0/self_attn/MatMul_output_0`.
  Shape arithmetic is kept at run time: `Shape → Gather → Unsqueeze → Concat` before
  every `Reshape`, even for dimensions that are static (head count, head dim).
- **Dynamo**: IR version {dynamo_ir}, opset {dynamo_opset}; {dynamo_functions} (the
  onnxscript optimizer inlines them); `value_info` with the shape of every
  intermediate; scalars and shape constants are small *initializers* (`val_<n>`), no
  `Constant` nodes; {dynamo_nodes} nodes for llama_tiny.  Every node carries
  `metadata_props` (`namespace`, `pkg.torch.onnx.class_hierarchy`, `fx_node`,
  `name_scopes`, `stack_trace`); `export.py` rewrites the absolute file names in the
  stack traces to repository-relative ones (`models/export.py`) and changes nothing
  else.  The `value_info` entries of the torch-named parameters carry
  `pkg.torch.export.graph_signature.InputSpec.kind = PARAMETER` metadata (the folded
  `val_<n>` copies do not).
- Opset-dependent forms a loader must accept: `ReduceMean` axes as an attribute
  (legacy, opset 17) vs as an input (dynamo, opset 18+); `Split` with a `split` sizes
  input (legacy) vs `num_outputs` attribute (dynamo); `Shape` with `start`/`end`
  attributes (dynamo); `Reshape allowzero=1` (dynamo) vs `allowzero=0` (legacy);
  `LayerNormalization` with `stash_type=1` written out (dynamo).
- Dynamic axes worked with both exporters; no fallback to static shapes was needed.
  Inputs and outputs use the symbolic dims `batch` and `seq` in both files.  The
  dynamo graph reads `seq` from `Shape(labels)` (torch.export unified the two inputs'
  symbols), the legacy graph from `Shape(input_ids)`.

Weights (see `initializers.txt` in each folder):

- **Both exporters fold the transpose of every `nn.Linear` weight applied to a 3-D
  input** into a new initializer holding `W^T` ([in, out]) consumed by a plain `MatMul`:
  legacy names it `onnx::MatMul_<n>`, dynamo `val_<n>`; the original `[out, in]`
  tensor is not stored and the torch name is lost.  Biased linears are `MatMul` +
  `Add` (legacy writes `Add(bias, y)`, dynamo `Add(y, bias)`).  On 2-D inputs (mlp)
  both emit `Gemm(transB=1)` on the untouched, torch-named weights.
- **Tied weights (gpt2_tiny)**: `wte.weight` appears twice in both files — once as
  the `Gather` table (legacy calls it `wte.weight`, dynamo `lm_head.weight`) and once
  as the folded transposed copy for the lm head (`onnx::MatMul_318` / `val_99`).
  A trainer must sum the two gradients and update both copies together to match
  PyTorch.
- **Buffers**: the RoPE `inv_freq` buffer (non-persistent) becomes, already reshaped
  to [1, 8, 1], a `Constant` node in legacy (`onnx::Expand_36`, feeding an `Expand`
  whose shape is computed at run time) and an initializer named `expand` in dynamo.
  It is not a parameter and must not be trained.
- Norm weights, biases, `embed_tokens.weight`, `wpe.weight` keep their torch names
  in both files.

Patterns (what each fusion has to match):

- **RMSNorm** (llama_tiny, ×5):
  legacy `Cast(to=float) → Pow(·, 2) → ReduceMean(axes=[-1]) → Add(·, 1e-6) → Sqrt →
  Div(1, ·) → Mul(x, ·) → Cast(to=float) → Mul(weight, ·)` (the two `Cast`s are the
  no-op `.to(float32)` / `.to(input_dtype)` of the HF code);
  dynamo `Pow(x, 2) → ReduceMean(axes input [-1]) → Add → Sqrt → Reciprocal → Mul(x, ·)
  → Mul(weight, ·)`, no `Cast`s.  Scalars: `Constant` nodes vs initializers.
- **RoPE** (llama_tiny): cos/sin computed once per graph from `Range(0, seq)`:
  `MatMul(inv_freq[1,8,1], pos[1,1,S]) → Transpose(0,2,1) → Concat(f, f) → Cos / Sin`
  (both `Cast` the int64 positions to float; legacy adds 4 no-op float `Cast`s and a
  run-time `Expand` of `inv_freq`), then
  `Unsqueeze(axis 1)`.  Per q and per k: `Mul(q, cos)`, `rotate_half` =
  `Slice(q, 0:d/2) , Slice(q, d/2:) → Neg → Concat(-x2, x1, axis -1)`, `Mul(·, sin)`,
  `Add`.  In dynamo the slice bounds are constants (`[0]`, `[8]`, `[INT64_MAX]`, axis
  `[3]`); in legacy `d/2` is computed at run time (`Shape → Gather(3) → Div(2) → Cast →
  Cast → Unsqueeze`) so the RoPE pattern needs shape-constant folding first.
- **SiLU / SwiGLU**: both `Sigmoid(g) → Mul(g, ·)`, then `Mul(silu, up)`; no single
  SiLU/Swish op.
- **GELU (gelu_new)** (gpt2_tiny): both exporters keep the explicit formula:
  `Mul(x, 0.5)`, `Pow(x, 3) → Mul(0.044715) → Add(x, ·) → Mul(0.7978846) → Tanh →
  Add(1) → Mul(half_x, ·)` — no `Gelu` op (it needs opset 20 and was not used by the
  dynamo exporter for this Python-level formula either).
- **LayerNorm** (gpt2_tiny): one `LayerNormalization(axis=-1, eps 1e-5)` node in both.
- **Attention**: no fused attention op; `MatMul(q, kᵀ)`, scale, mask, `Softmax(axis=-1)`,
  `MatMul(·, v)`.  llama_tiny: `Mul(·, 0.25)` then `Add(mask)` with the additive mask
  `Where(LessOrEqual(j, i), 0, -3.4028235e38)` built once; legacy puts two no-op
  `Cast(to=float)` after `Softmax` (the `dtype=torch.float32` argument).
  gpt2_tiny: `Div(·, 4)` then `Where(mask, scores, -3.4028235e38)`; in legacy the
  divisor is computed at run time (`Shape → Slice → Squeeze → Cast → Pow(0.5) →
  ConstantOfShape + Add`, which is where its two extra `Pow`s come from), in dynamo it
  is the constant initializer `full` = 4.0.  The `kᵀ` transpose is merged with the
  head transpose into one `Transpose(perm 0,2,3,1)` in gpt2_tiny (both exporters).
- **Loss**: *not decomposed* by either exporter: the causal-LM loss is
  `Slice(logits, [:, :-1]) → Reshape([-1, 64])`, `Slice(labels, [:, 1:]) → Reshape([-1])`,
  `SoftmaxCrossEntropyLoss(ignore_index=-100, reduction="mean")` with one output (no
  log-prob output).  mlp: `SoftmaxCrossEntropyLoss` directly on the `Gemm` output.
  Legacy computes the `-1, V` reshape target at run time from `Shape(logits)`;
  dynamo uses the constant `[-1, 64]`.
- **lm head**: a `MatMul` whose output is the graph output `logits`, so a fused
  linear-cross-entropy must keep `logits` alive (it is a model output here)."""


# --------------------------------------------------------------------------

def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions()))

    for name in MODELS:
        shutil.rmtree(os.path.join(HERE, name), ignore_errors=True)

    summary = {}
    for name in MODELS:
        model = make_model(name)
        inputs = test_inputs(name)
        ref = eager(model, inputs)
        for exporter in EXPORTERS:
            export_one(name, exporter, model, inputs, ref, summary)
        record_training(name, summary)

    write_readme(summary)
    rows, total = tree_sizes()
    print(f"wrote {len(rows)} files, {total} bytes")


if __name__ == "__main__":
    main()
