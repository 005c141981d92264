#!/usr/bin/env python3
"""Exports Liger Kernel's torch reference JSD (generalized Jensen-Shannon
divergence) with both torch.onnx exporters, for tests/test_fuse_loss.c.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch onnx onnxscript
    /tmp/venv/bin/python3 tests/data/jsd/export.py

Writes tests/data/jsd/<beta>_<exporter>[_label]/model.onnx and, in the ONNX
backend-test layout, test_data_set_0/input_<i>.pb (x = log Q, y = log P,
[t]) and output_0.pb (the loss PyTorch eager computes).  Rows are a dynamic
axis ("rows"), so the batchmean divides by a shape read at run time.

The module is Liger's test reference (test/transformers/test_jsd.py) with
one change: with labels, Liger counts the kept rows with `.item()` and
returns 0 when there are none; that is not exportable, so the count stays
a tensor (no special case for zero kept rows).
"""
import os

import numpy as np
import onnx
import onnx.numpy_helper
import torch
from torch.nn import KLDivLoss

HERE = os.path.dirname(os.path.abspath(__file__))


class TorchJSD(torch.nn.Module):
    def __init__(self, beta=0.5, ignore_index=-100):
        super().__init__()
        self.kl = KLDivLoss(reduction="none", log_target=True)
        self.beta = beta
        self.ignore_index = ignore_index

    def forward(self, log_q, log_p, label=None):
        if self.beta == 0.0:
            loss = self.kl(log_q, log_p).sum(dim=-1)
        elif self.beta == 1.0:
            loss = self.kl(log_p, log_q).sum(dim=-1)
        else:
            log_p, log_q = log_p.to(torch.float), log_q.to(torch.float)
            log_p, log_q = log_p.view(-1, log_p.size(-1)), log_q.view(-1, log_q.size(-1))
            m = torch.lerp(torch.exp(log_q), torch.exp(log_p), self.beta)
            loss = self.beta * self.kl(torch.log(m), log_p).sum(dim=-1) + (
                1 - self.beta
            ) * self.kl(torch.log(m), log_q).sum(dim=-1)
        if label is not None:
            keep = label != self.ignore_index
            loss = torch.where(keep, loss, 0.0)
            loss = (loss / keep.sum()).sum()
        else:
            loss = (loss / log_q.shape[0]).sum()
        return loss


# (beta, exporter, labels): lerp picks its first branch for beta < 0.5
CASES = [
    (0.5, "legacy", False), (0.5, "dynamo", True), (0.25, "dynamo", False),
    (0.75, "legacy", True), (0.0, "legacy", True), (0.0, "dynamo", False),
    (1.0, "dynamo", True), (1.0, "legacy", False),
]


def save_pb(array, name, path):
    t = onnx.numpy_helper.from_array(array, name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def strip_metadata(path):
    """Drops the dynamo exporter's per-node metadata (stack traces with this
    machine's paths); the graph itself is left as exported."""
    m = onnx.load(path)
    del m.metadata_props[:]
    for n in m.graph.node:
        del n.metadata_props[:]
    onnx.save(m, path)


def export(beta, exporter, labels):
    name = "%g_%s%s" % (beta, exporter, "_label" if labels else "")
    out = os.path.join(HERE, name)
    os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(5, 16, generator=g).log_softmax(-1)
    y = (2 * torch.randn(5, 16, generator=g)).log_softmax(-1)
    args = (x, y)
    names = ["x", "y"]
    if labels:
        args += (torch.tensor([3, -100, 0, 7, -100]),)
        names.append("t")
    mod = TorchJSD(beta).eval()
    path = os.path.join(out, "model.onnx")
    if exporter == "dynamo":
        rows = torch.export.Dim("rows")
        dyn = {"log_q": {0: rows}, "log_p": {0: rows}}
        if labels:
            dyn["label"] = {0: rows}
        torch.onnx.export(mod, args, path, dynamo=True, input_names=names,
                          output_names=["loss"], dynamic_shapes=dyn, external_data=False)
    else:
        torch.onnx.export(mod, args, path, dynamo=False, opset_version=17, input_names=names,
                          output_names=["loss"], dynamic_axes={n: {0: "rows"} for n in names})
    strip_metadata(path)
    for i, (a, n) in enumerate(zip(args, names)):
        save_pb(a.numpy(), n, os.path.join(out, "test_data_set_0", "input_%d.pb" % i))
    with torch.no_grad():
        loss = mod(*args)
    save_pb(np.asarray(loss.numpy(), dtype=np.float32), "loss",
            os.path.join(out, "test_data_set_0", "output_0.pb"))
    print("%s: %d bytes" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    torch.manual_seed(0)
    for case in CASES:
        export(*case)
