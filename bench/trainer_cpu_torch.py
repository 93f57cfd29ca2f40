#!/usr/bin/env python3
"""trainer_cpu_torch.py - the PyTorch peer of bench/trainer_cpu.sh.

Trains the same MLP as the dtrain run (784-hidden...-10, ReLU, AdamW, OneCycle,
grad clipping) on Fashion-MNIST with the same batch size and thread count, the
way a careful PyTorch user would on CPU: the whole data set normalised once in
memory, batches gathered by index from torch.randperm (no DataLoader
overhead), PyTorch's default AdamW path.  Prints one line:
    torch samples_per_s=<float> steps=<n> batch=<b> threads=<t>
Timing starts after `warmup` steps, like dtrain's steady state.
"""
import argparse
import gzip
import time

import numpy as np
import torch


def load(path):
    with gzip.open(f"{path}/train-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(f"{path}/train-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(x.copy()).float() / 255 - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", default="1024,1024")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x, y = load(a.data)
    sizes = [784] + [int(h) for h in a.hidden.split(",")] + [10]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    total = a.warmup + a.steps
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=total)
    perm = torch.randperm(len(x))
    pos = 0
    t0 = None
    for step in range(total):
        if step == a.warmup:
            t0 = time.perf_counter()
        if pos + a.batch > len(x):
            perm, pos = torch.randperm(len(x)), 0
        idx = perm[pos:pos + a.batch]
        pos += a.batch
        xb, yb = x[idx], y[idx]
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    dt = time.perf_counter() - t0
    print(f"torch samples_per_s={a.steps * a.batch / dt:.1f} steps={a.steps} batch={a.batch} threads={a.threads}")


if __name__ == "__main__":
    main()
