#!/usr/bin/env python3
"""gpt2_cpu_torch.py - the PyTorch peer of bench/gpt2_cpu_step.c (run by bench/gpt2_cpu.sh).

nanoGPT's GPT (dropout 0, bias on, head tied to wte) with the vocabulary as
given (50257 unpadded, as Hugging Face's GPT2LMHeadModel has it), trained the
way a careful PyTorch user would on CPU: F.scaled_dot_product_attention with
is_causal (the flash kernel), AdamW with nanoGPT's groups (decay 0.1 on 2+
dimensions), fused=True, betas (0.9, 0.95), clip_grad_norm_ 1.0; one fixed
random batch (data loading is not measured).  Prints
    torch tokens/s: X
    torch cpu-s/step: Y   (CPU seconds of all threads per step)
over `steps` timed steps after `warmup`.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, V, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(layers=6, embd=384, heads=6, vocab=50257, seq=256, batch=8, threads=1, warmup=2,
                     steps=10).items():
        ap.add_argument(f"--{k}", type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = GPT(a.layers, a.heads, a.embd, a.vocab, a.seq)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    tok = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    x, y = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    print(f"torch params: {sum(p.numel() for p in params)}")
    print(f"torch step: {1e3 * dt / a.steps:.1f} ms")
    print(f"torch tokens/s: {a.batch * a.seq * a.steps / dt:.1f}")
    print(f"torch cpu-s/step: {dc / a.steps:.2f}")
    print(f"torch loss: {loss.item():.6f}")


if __name__ == "__main__":
    main()
