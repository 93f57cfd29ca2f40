"""trainer_gpu_torch.py - PyTorch's peers for bench/trainer_gpu.sh: training
the same MLP (784-1024-1024-10, ReLU, cross-entropy, AdamW lr 1e-3 wd 0.01)
on Fashion-MNIST on the same GPU, at PyTorch's best: the data set lives on the
GPU as bytes and each batch is gathered and normalised there (no DataLoader,
no host copies), a fresh permutation per epoch (drop_last).  Variants:
  eager    fused AdamW
  compile  torch.compile(model) (default mode) + fused AdamW
  graph    forward, backward and fused capturable AdamW captured in one
           torch.cuda.CUDAGraph and replayed (the batch's indices are copied
           into the graph's static index tensor before each replay)
fp32 runs with TF32 off (dtrain's fp32 GEMMs are true fp32), tf32 runs with it on (dtrain's
trainer.tf32: true); bf16 is autocast
with fp32 master weights.  Prints "torch <variant> <dtype> B=<batch>:
<samples/s> samples/s, <us> us/step, test accuracy <acc>".

    python3 bench/trainer_gpu_torch.py --data DIR --batch 256 --dtype fp32 --steps 3000 [--variants eager,graph]
Not a test.
"""
import argparse
import gzip
import time

import numpy as np
import torch
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530


def idx_file(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data):
    out = []
    for split in ("train", "t10k"):
        x = idx_file(f"{data}/{split}-images-idx3-ubyte.gz").reshape(-1, 784)
        y = idx_file(f"{data}/{split}-labels-idx1-ubyte.gz")
        out.append((torch.from_numpy(x.copy()).cuda(), torch.from_numpy(y.astype(np.int64)).cuda()))
    return out


def build(capturable):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True, capturable=capturable)
    return model, opt


class Batches:
    """Index slices of a per-epoch permutation made on the GPU (drop_last)."""

    def __init__(self, n, batch):
        self.n, self.batch, self.at = n, batch, n
        self.g = torch.Generator(device="cuda")
        self.g.manual_seed(0)

    def next(self):
        if self.at + self.batch > self.n:
            self.perm = torch.randperm(self.n, device="cuda", generator=self.g)
            self.at = 0
        s = self.perm[self.at:self.at + self.batch]
        self.at += self.batch
        return s


def accuracy(model, test, bf16):
    x, y = test
    hits = 0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        for i in range(0, x.shape[0], 1000):
            xb = (x[i:i + 1000].float() / 255 - MEAN) / STD
            hits += (model(xb).argmax(1) == y[i:i + 1000]).sum().item()
    return hits / x.shape[0]


def run(variant, a, train, test):
    bf16 = a.dtype == "bf16"
    model, opt = build(capturable=variant == "graph")
    fwd = torch.compile(model) if variant == "compile" else model
    images, labels = train
    batches = Batches(images.shape[0], a.batch)
    loss_sum = torch.zeros((), device="cuda")

    def step(idx):
        x = (images[idx].float() / 255 - MEAN) / STD
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(fwd(x), labels[idx])
        loss.backward()
        opt.step()
        loss_sum.add_(loss.detach())

    if variant == "graph":
        static_idx = batches.next().clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                step(static_idx)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            step(static_idx)

        def one():
            static_idx.copy_(batches.next())
            g.replay()
    else:
        def one():
            opt.zero_grad(set_to_none=True)
            step(batches.next())

    for _ in range(a.warmup):
        one()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        one()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    acc = accuracy(model, test, bf16)
    sps = a.steps * a.batch / dt
    print(f"torch {variant} {a.dtype} B={a.batch}: {sps:.0f} samples/s, {dt / a.steps * 1e6:.1f} us/step, "
          f"test accuracy {acc:.4f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "tf32"])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--variants", default="eager,compile,graph")
    a = ap.parse_args()
    # tf32: fp32 weights and activations, matmuls on the tensor cores (dtrain's trainer.tf32)
    torch.backends.cuda.matmul.allow_tf32 = a.dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = a.dtype == "tf32"
    train, test = load(a.data)
    for v in a.variants.split(","):
        run(v, a, train, test)


if __name__ == "__main__":
    main()
