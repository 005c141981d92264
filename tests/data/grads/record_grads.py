#!/usr/bin/env python3
"""Records PyTorch's gradients of the bundled models for tests/test_autodiff.c.

    python3 tests/data/grads/record_grads.py

For each model of models/export.py (same code, seeds and initial weights as the
exported files), the loss of training batch 0 (models/<m>/train_data/
test_data_set_0) is back-propagated in PyTorch eager (fp32, one thread,
deterministic), and <model>.txt receives, per trainable parameter (torch name,
torch layout; a tied parameter once, its gradient summed over its uses):

    param <name> <rank> <dims...> <sum> <sum of squares> <max abs>
    <name> <flat index> <gradient>          (48 elements spread over the tensor)

The C test maps each ONNX initializer to its torch parameter through
models/<m>/<exporter>/initializers.txt (layout same / transposed), sums the
gradients of the initializers of one parameter (tied copies) and compares.
Tests never run this script; they read the files it writes.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "models"))
import export  # noqa: E402  (models/export.py: the model code and data)

SAMPLES = 48


def record(name):
    model = export.make_model(name).train()
    a, b = export.train_batches(name)[0]
    model.zero_grad(set_to_none=True)
    _, loss = model(torch.from_numpy(a), torch.from_numpy(b))
    loss.backward()
    lines = [f"# {name}: loss {loss.item():.9g} on train_data/test_data_set_0 "
             f"(torch {torch.__version__})"]
    for pname, p in model.named_parameters():  # tied parameters once
        g = p.grad.detach().double()
        flat = g.reshape(-1)
        dims = " ".join(str(d) for d in g.shape)
        lines.append(f"param {pname} {g.dim()} {dims} {flat.sum().item():.9g} "
                     f"{(flat * flat).sum().item():.9g} {flat.abs().max().item():.9g}")
        n = flat.numel()
        for k in range(min(SAMPLES, n)):
            i = (k * 7919 + 13) % n if n > SAMPLES else k
            lines.append(f"{pname} {i} {flat[i].item():.9g}")
    with open(os.path.join(HERE, f"{name}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{name}: loss {loss.item():.6f}, {len(list(model.parameters()))} parameters")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in export.MODELS:
        record(name)


if __name__ == "__main__":
    main()
