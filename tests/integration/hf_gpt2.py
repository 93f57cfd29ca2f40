"""hf_gpt2.py - Hugging Face's side of tests/integration/test_hf.sh (transformers, CPU).

  make DIR L H C V BLOCK SEED [f32|f16|bf16]
      save_pretrained of a randomly initialised GPT2LMHeadModel (torch.manual_seed(SEED)),
      every parameter moved by a little noise so LayerNorms and biases are not 1 and 0,
      stored in the given dtype (model.safetensors and config.json)
  logits DIR TOKENS OUT
      GPT2LMHeadModel.from_pretrained(DIR) in fp32 (a fp16/bf16 file is upcast), the logits
      of one sequence as [T, V] float32 little-endian into OUT
  generate DIR TOKENS N OUT
      greedy generation (do_sample=False), the new token ids on one line into OUT
  sample DIR TOKENS N TEMPERATURE TOP_K SEED OUT
      worker/sample.h's sampling, written out again here over transformers' logits: the last
      n_positions tokens, logits / temperature, the top-k kept (ties too), softmax in double,
      SplitMix64 from the seed, the first token whose cumulative weight exceeds u * sum
  compare A B
      two logits files agree to 1e-5 (|a - b| <= 1e-5 + 1e-5 |b|); prints the largest difference
  edit SRC DST drop|grow NAME
      a copy of a safetensors file without tensor NAME, or with one more row in it

Several commands run in one process when separated by "+" (transformers takes seconds to
import); compare imports numpy only.
"""
import sys


def tokens(s):
    import torch

    return torch.tensor([[int(t) for t in s.split(",")]])


def make(d, L, H, C, V, B, seed, dtype="f32"):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(int(seed))
    eot = 50256 if int(V) > 50256 else None
    cfg = GPT2Config(n_layer=int(L), n_head=int(H), n_embd=int(C), vocab_size=int(V), n_positions=int(B),
                     bos_token_id=eot, eos_token_id=eot, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    m = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    m = m.to({"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype])
    m.save_pretrained(d)


def load(d):
    import torch
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32).eval()


def logits(d, toks, out):
    import torch

    with torch.no_grad():
        load(d)(tokens(toks)).logits[0].float().contiguous().numpy().tofile(out)


def generate(d, toks, n, out):
    import torch

    m = load(d)
    x = tokens(toks)
    with torch.no_grad():
        y = m.generate(x, max_new_tokens=int(n), do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(x))
    with open(out, "w") as f:
        print(" ".join(str(int(t)) for t in y[0, x.shape[1]:]), file=f)


def splitmix64(state):
    m = (1 << 64) - 1
    state = (state + 0x9E3779B97F4A7C15) & m
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return state, z ^ (z >> 31)


def sample(d, toks, n, temperature, top_k, seed, out):
    import math

    import torch

    m, x = load(d), [int(t) for t in toks.split(",")]
    state, temperature, top_k = int(seed), float(temperature), int(top_k)
    for _ in range(int(n)):
        with torch.no_grad():
            row = m(torch.tensor([x[-m.config.n_positions:]])).logits[0, -1].float().tolist()
        lo = sorted(row, reverse=True)[top_k - 1] if 0 < top_k < len(row) else -math.inf
        top = max(row)
        w = [math.exp((v - top) / temperature) if v >= lo else 0.0 for v in row]
        state, z = splitmix64(state)
        u, acc = (z >> 11) * 2.0**-53 * sum(w), 0.0
        for i, wi in enumerate(w):
            acc += wi
            if wi and acc > u:
                break
        x.append(i)
    with open(out, "w") as f:
        print(" ".join(str(t) for t in x), file=f)


def compare(a, b):
    import numpy as np

    x, y = np.fromfile(a, dtype="<f4"), np.fromfile(b, dtype="<f4")
    if x.shape != y.shape:
        print(f"{a}: {x.size} values, {b}: {y.size}")
        sys.exit(1)
    diff = float(np.max(np.abs(x - y)))
    ok = bool(np.all(np.abs(x - y) <= 1e-5 + 1e-5 * np.abs(y)))
    print(f"{x.size} logits, largest difference {diff:.3g}, spread of the logits {float(np.std(y)):.3g}")
    sys.exit(0 if ok and np.std(y) > 0.01 else 1)


def edit(src, dst, how, name):
    import torch
    from safetensors.torch import load_file, save_file

    t = load_file(src)
    if how == "drop":
        del t[name]
    else:
        t[name] = torch.cat([t[name], t[name][:1]])
    save_file(t, dst, metadata={"format": "pt"})


if __name__ == "__main__":
    commands = {"make": make, "logits": logits, "generate": generate, "sample": sample, "compare": compare,
                "edit": edit}
    words = sys.argv[1:]
    while words:
        n = words.index("+") if "+" in words else len(words)
        commands[words[0]](*words[1:n])
        words = words[n + 1:]
