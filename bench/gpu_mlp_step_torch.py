"""gpu_mlp_step_torch.py - PyTorch's peers for bench/gpu_mlp_step.c: the same
step (784-1024-1024-10 MLP, ReLU, cross-entropy, AdamW) eagerly with fused
AdamW, and whole (forward, backward, fused capturable AdamW) in one replayed
torch.cuda.CUDAGraph, the strongest PyTorch peer named in issue 8.  fp32 runs
with TF32 off (dtrain's fp32 GEMMs are true fp32); bf16 is autocast with fp32
master weights.  Prints "torch <dtype> B=<batch> <eager|graph>: <us> us/step".

    python3 bench/gpu_mlp_step_torch.py --batch 256 --dtype fp32 [--steps 200]
Not a test.
"""
import argparse

import torch
import torch.nn.functional as F


def build(batch, graph):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10)).cuda()
    x = torch.rand(batch, 784, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, capturable=graph)
    return model, x, y, opt


def make_step(model, x, y, opt, bf16):
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def timed(fn, steps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    bf16 = a.dtype == "bf16"

    model, x, y, opt = build(a.batch, graph=False)
    step = make_step(model, x, y, opt, bf16)
    for _ in range(20):
        opt.zero_grad(set_to_none=False)
        step()
    eager = timed(lambda: (opt.zero_grad(set_to_none=False), step()), a.steps)
    print(f"torch {a.dtype} B={a.batch} eager: {eager:.1f} us/step", flush=True)

    model, x, y, opt = build(a.batch, graph=True)
    step = make_step(model, x, y, opt, bf16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        step()
    for _ in range(10):
        g.replay()
    graph = timed(g.replay, a.steps)
    print(f"torch {a.dtype} B={a.batch} graph: {graph:.1f} us/step", flush=True)


if __name__ == "__main__":
    main()
