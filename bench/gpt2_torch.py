#!/usr/bin/env python3
"""gpt2_torch.py - the PyTorch peer of dtrain's GPT-2 on the GPU (issue 25).

Used by bench/gpt2_gpu.sh (speed and memory: eager, torch.compile's default and
max-autotune-no-cudagraphs modes, vocabulary 50257 or nanoGPT's 50304) and
tests/gpu/test_gpt2_curve.sh (the loss at every step from the same initial
weights and tokens).  Not a test by itself and not a trainer.

The model is issue 15/24's GPT-2: Hugging Face's GPT2LMHeadModel math, written
as nanoGPT writes it with dropout 0 (nn.Linear, so a Conv1D [in, out] weight of
dtrain's layout is its transpose), LayerNorm eps 1e-5, tanh GELU, the head tied
to wte, F.scaled_dot_product_attention(is_causal=True) (on a GPU PyTorch's
choice of kernel: cuDNN's on Hopper when its cuDNN is 9.15.1 or later, else
flash; --sdpa picks one).  The vocabulary is used as given: 50257 is Hugging
Face's; --vocab 50304 is nanoGPT's padding for speed (the 47 extra rows of wte
are never a target; the data's ids are checked against --data-vocab, default
--vocab).  Training as a careful PyTorch user does: bf16 autocast,
AdamW(fused=True, betas 0.9/0.95, eps 1e-8, decay 0.1 on the tensors of 2 or
more dimensions only), clip_grad_norm_ 1.0, --tf32 as nanoGPT sets it, and
torch.compile(model) in its default mode (--mode compile) or in
"max-autotune-no-cudagraphs" (--mode max-autotune: Triton GEMM templates tuned
against cuBLAS per shape; CUDA graphs left out, as in nanoGPT's runs with an
optimizer step outside the compiled model).

Learning rate: constant, or dtrain's cosine (worker/optim/lr_schedule.h:
lr*(s+1)/N while s < N, then min_lr + 0.5*(1 + cos(pi*(s-N)/(S-N)))*(lr - min_lr),
in that order in double).

Data: llm.c token shards (--shards GLOB: header of 256 int32 with magic 20240520,
version 1, count, then uint16 tokens) read in llm.c's order, which is dtrain's
with shuffle: false on one rank: shards sorted by name, in each the windows of
B*T+1 tokens at offsets 0, B*T, 2*B*T, ... while a whole window fits, then the
next shard, and round again.  Without --shards, random ids from --seed.  The
tokens are moved to the device once (data loading is not measured).

Weights: GPT-2's initialisation from --seed (N(0, 0.02), the residual
projections N(0, 0.02/sqrt(2 n_layer)), biases 0, LayerNorm 1/0), or --init
FILE.safetensors in dtrain's / Hugging Face's names and Conv1D layout (F32,
F16, BF16).  --write-init FILE writes the initial weights that way (what
trainer.init_from reads) and exits.  safetensors is read and written here with
struct and numpy (8-byte little-endian header length, JSON header, raw data):
no safetensors or transformers package needed.

Prints, per run, one line (keys in this order, parsed by bench/gpt2_gpu.sh):
  gpt2_torch mode=eager vocab=50257 B=16 T=1024 dtype=bf16 steps=30 tokens_per_s=... ms_per_step=...
      peak_alloc_gib=... peak_reserved_gib=... device_used_gib=... loss=... warmup_s=...
(timed over --steps steps after --warmup; the memory keys are nan on CPU;
device_used is the whole device's used memory at the end, CUDA context
included, as NVML counts dtrain's gpu_mem_mib; --mem-cap-gib caps the caching
allocator, to see whether a run fits a smaller card), and with --log-every N a line
  step S loss L lr LR grad_norm G
every N steps (the loss of step S's forward, 1-based, as dtrain's metrics.jsonl).
"""
import argparse
import contextlib
import glob
import json
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---- the model (nanoGPT's names = Hugging Face's under transformer.) ----


class Attention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(C, eps=1e-5), Attention(C, H)
        self.ln_2, self.mlp = nn.LayerNorm(C, eps=1e-5), MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, L, H, C, V, block):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C), wpe=nn.Embedding(block, C),
            h=nn.ModuleList(Block(C, H) for _ in range(L)), ln_f=nn.LayerNorm(C, eps=1e-5)))
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in t.h:
            x = b(x)
        logits = F.linear(t.ln_f(x), t.wte.weight)  # the head tied to wte
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# Linear weights are [out, in]; dtrain and Hugging Face keep these Conv1D [in, out].
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

# ---- safetensors, by hand ----


def write_safetensors(path, tensors):
    header, off = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        lo, hi = d["data_offsets"]
        raw = data[8 + n + lo:8 + n + hi]
        if d["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif d["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif d["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            sys.exit(f"gpt2_torch: {path}: tensor {name} is {d['dtype']}; F32, F16 and BF16 are read")
        out[name] = a.reshape(d["shape"])
    return out


def hf_state(model):
    """The model's tensors under Hugging Face's names, Conv1D layout, fp32 numpy."""
    return {n: (p.detach().float().t() if n.endswith(CONV1D) else p.detach().float()).contiguous().cpu().numpy()
            for n, p in model.named_parameters()}


def load_hf(model, path):
    st = read_safetensors(path)
    with torch.no_grad():
        for n, p in model.named_parameters():
            a = st.get(n, st.get(n[len("transformer."):]))
            if a is None:
                sys.exit(f"gpt2_torch: {path} has no tensor {n}")
            t = torch.from_numpy(np.array(a))
            t = t.t() if n.endswith(CONV1D) else t
            if n.endswith("wpe.weight"):
                t = t[:p.shape[0]]
            if tuple(t.shape) != tuple(p.shape):
                sys.exit(f"gpt2_torch: {path}: {n} is {list(a.shape)}, the model wants {list(p.shape)}")
            p.copy_(t)


# ---- data ----


def read_shards(pattern):
    shards = []
    for path in sorted(glob.glob(pattern)):
        head = np.fromfile(path, dtype="<i4", count=256)
        if len(head) < 3 or head[0] != 20240520 or head[1] != 1:
            sys.exit(f"gpt2_torch: {path} is not an llm.c token shard (magic 20240520, version 1)")
        tok = np.fromfile(path, dtype="<u2", offset=1024)
        if len(tok) != head[2]:
            sys.exit(f"gpt2_torch: {path}: the header counts {head[2]} tokens, the file has {len(tok)}")
        shards.append(tok)
    if not shards:
        sys.exit(f"gpt2_torch: no file matches {pattern}")
    return shards


class Batches:
    """llm.c's order: each shard's windows of B*T+1 at multiples of B*T, shard after shard, round again."""

    def __init__(self, shards, B, T, vocab, device):
        self.B, self.T = B, T
        self.places = []
        for i, s in enumerate(shards):
            if s.max(initial=0) >= vocab:
                sys.exit(f"gpt2_torch: shard {i} holds token {s.max()} >= vocab {vocab}")
            n = (len(s) - 1) // (B * T)
            if n < 1:
                sys.exit(f"gpt2_torch: shard {i} has {len(s)} tokens, fewer than B*T+1 = {B * T + 1}")
            self.places += [(i, k * B * T) for k in range(n)]
        self.shards = [torch.from_numpy(s.astype(np.int64)).to(device) for s in shards]
        self.at = 0

    def next(self):
        i, off = self.places[self.at % len(self.places)]
        self.at += 1
        w = self.shards[i][off:off + self.B * self.T + 1]
        return w[:-1].view(self.B, self.T), w[1:].view(self.B, self.T)


def lr_at(a, s, total):
    if a.schedule == "constant":
        return a.lr
    N = a.lr_warmup
    if s < N:
        return a.lr * (s + 1) / N
    return a.min_lr + 0.5 * (1 + math.cos(math.pi * (s - N) / (total - N))) * (a.lr - a.min_lr)


# ---- the run ----


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--mode", default="eager", choices=["eager", "compile", "max-autotune"])
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    for k, v in dict(layers=12, heads=12, embd=768, vocab=50257, block=1024, batch=16, seq=1024, warmup=10,
                     steps=30, seed=0, lr_warmup=0, log_every=0, threads=0, data_vocab=0).items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    for k, v in dict(lr=6e-4, min_lr=0.0, weight_decay=0.1, grad_clip=1.0, beta1=0.9, beta2=0.95,
                     eps=1e-8, mem_cap_gib=0.0).items():
        ap.add_argument("--" + k.replace("_", "-"), type=float, default=v)
    ap.add_argument("--schedule", default="constant", choices=["constant", "cosine"])
    ap.add_argument("--shards", help="glob of llm.c token shards (default: random ids from --seed)")
    ap.add_argument("--init", help="initial weights: a .safetensors in Hugging Face's names and layout")
    ap.add_argument("--write-init", help="write the initial weights there (safetensors, F32) and exit")
    ap.add_argument("--tf32", action="store_true", help="fp32 matmuls on tensor cores (off, as PyTorch's default)")
    ap.add_argument("--bf16-full-reduction", action="store_true",
                    help="forbid cuBLAS's reduced-precision (bf16) reductions in bf16 GEMMs, which PyTorch allows "
                         "by default (torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction); "
                         "for tests/gpu/curve_diag.sh")
    ap.add_argument("--sdpa", default="auto", choices=["auto", "cudnn", "flash", "efficient", "math"],
                    help="the attention kernel (auto: PyTorch's choice; cuDNN's on an H200 with cuDNN >= 9.15.1)")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT(a.layers, a.heads, a.embd, a.vocab, a.block)  # on the CPU: the same numbers on any machine
    if a.write_init:
        write_safetensors(a.write_init, hf_state(model))
        print(f"gpt2_torch: wrote {a.write_init} ({sum(p.numel() for p in model.parameters())} parameters)")
        return
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpt2_torch: no CUDA device (use --device cpu)")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.tf32
    if a.bf16_full_reduction:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    dev = torch.device(a.device)
    if a.mem_cap_gib > 0 and dev.type == "cuda":
        i = torch.cuda.current_device()  # the allocator's calls want an index, not torch.device("cuda")
        whole = torch.cuda.get_device_properties(i).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.mem_cap_gib * (1 << 30) / whole), i)
    if a.init:
        load_hf(model, a.init)
    model.to(dev)
    total = a.warmup + a.steps
    if a.shards:
        shards = read_shards(a.shards)
    else:
        shards = [np.random.default_rng(a.seed).integers(0, a.data_vocab or a.vocab, total * a.batch * a.seq + 1,
                                                         dtype=np.uint16)]
    data = Batches(shards, a.batch, a.seq, a.data_vocab or a.vocab, dev)

    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, fused=True)
    if a.mode == "compile":
        fwd = torch.compile(model)
    elif a.mode == "max-autotune":
        fwd = torch.compile(model, mode="max-autotune-no-cudagraphs")
    else:
        fwd = model
    amp = a.dtype == "bf16"
    def attention():
        if a.sdpa == "auto":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel({"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[a.sdpa])

    def step(s):
        x, y = data.next()
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp), attention():
            loss = fwd(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, a.grad_clip) if a.grad_clip > 0 else None
        lr = lr_at(a, s, total)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        if a.log_every and (s + 1) % a.log_every == 0:
            gn = norm.item() if norm is not None else float("nan")
            print(f"step {s + 1} loss {loss.item():.9g} lr {lr:.9g} grad_norm {gn:.9g}", flush=True)
        return loss

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t_start = time.perf_counter()
    for s in range(a.warmup):
        loss = step(s)
    sync()
    t0 = time.perf_counter()
    for s in range(a.warmup, total):
        loss = step(s)
    sync()
    dt = time.perf_counter() - t0
    gib = float(1 << 30)
    if dev.type == "cuda":
        free, whole = torch.cuda.mem_get_info()
        mem = (torch.cuda.max_memory_allocated() / gib, torch.cuda.max_memory_reserved() / gib, (whole - free) / gib)
    else:
        mem = (float("nan"),) * 3
    steps = max(a.steps, 1)
    print(f"gpt2_torch mode={a.mode} vocab={a.vocab} B={a.batch} T={a.seq} dtype={a.dtype} steps={a.steps} "
          f"tokens_per_s={a.batch * a.seq * a.steps / dt if a.steps else float('nan'):.1f} "
          f"ms_per_step={1e3 * dt / steps:.2f} peak_alloc_gib={mem[0]:.2f} peak_reserved_gib={mem[1]:.2f} "
          f"device_used_gib={mem[2]:.2f} loss={loss.item():.6f} warmup_s={t0 - t_start:.1f}", flush=True)


if __name__ == "__main__":
    main()
