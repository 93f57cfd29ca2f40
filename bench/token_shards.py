#!/usr/bin/env python3
"""token_shards.py - llm.c token shards of random ids, for benchmarks (bench/gpt2_gpu.sh).

Writes DIR/<name>_000000.bin, ... : each a header of 256 little-endian int32
(magic 20240520, version 1, token count, zeros) and then the tokens as
little-endian uint16, the format worker/data/tokens.c and llm.c's
dev/data/*.py read.  The ids are uniform in [0, vocab) from numpy's
default_rng(seed), so a run is the same on any machine.  Not for text: `dtrain
data bytes` writes the bytes of a text as shards.

  python3 bench/token_shards.py -o DIR --tokens 2097152 [--vocab 50257] [--seed 0] [--shards 1] [--name train]
"""
import argparse
import os

import numpy as np

MAGIC, VERSION = 20240520, 1


def write_shard(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (MAGIC, VERSION, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", dest="dir", required=True)
    ap.add_argument("--tokens", type=int, required=True, help="tokens per shard")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--name", default="train")
    a = ap.parse_args()
    if not 1 <= a.vocab <= 65536 or a.tokens < 1 or a.tokens >= 2**31:
        ap.error("--vocab must be 1..65536 (uint16 ids) and --tokens 1..2^31-1 (an int32 count)")
    os.makedirs(a.dir, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    for i in range(a.shards):
        path = os.path.join(a.dir, f"{a.name}_{i:06d}.bin")
        write_shard(path, rng.integers(0, a.vocab, a.tokens, dtype=np.uint16))
        print(f"{path}: {a.tokens} tokens")


if __name__ == "__main__":
    main()
