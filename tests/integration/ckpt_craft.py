#!/usr/bin/env python3
"""ckpt_craft.py - checkpoints crafted to pass every checksum dtrain's reader checks.

The checksums of a dtrain checkpoint (worker/ckpt.c: a CRC-32C per tensor, one over the
metadata) are not keyed, so anyone who can write a file can make one that passes them;
what such a file may still not do is the subject of tests/integration/test_record_attacks.sh.
Standard library only.

    ckpt_craft.py declare OUT [small|xl]   a 33 KB file whose model entry declares GPT-2
                                           124M (or 1.5B): one tensor of 8192 floats

Not a general writer: tests/fuzz/make_seeds.py writes the fuzzers' seeds.
"""
import json
import struct
import sys

SIZES = {"F32": 4, "F64": 8, "I64": 8, "F16": 2, "BF16": 2, "U8": 1}
_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    _TABLE.append(_c)


def crc32c(b):
    crc = 0xFFFFFFFF
    for x in b:
        crc = (crc >> 8) ^ _TABLE[(crc ^ x) & 0xFF]
    return crc ^ 0xFFFFFFFF


def safetensors(tensors, meta):
    """tensors: [(name, dtype, shape, bytes)] -> a file laid out as dtrain's writer lays it out."""
    order = sorted(tensors, key=lambda t: (-SIZES[t[1]], t[0]))
    header, off, data = {"__metadata__": meta}, 0, b""
    for name, dtype, shape, raw in order:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def checkpoint(tensors, model, step=1, seed=0):
    """A dtrain-trainer-1 file at `step` of `tensors`, every checksum right."""
    meta = {"format": "dtrain-trainer-1", "step": str(step), "epoch": "0", "batch": str(step),
            "seed": str(seed), "world": "1", "batch_size": "1", "adamw_step": str(step),
            "amp": "off", "loss_scale": "1", "growth_tracker": "0", "skipped_steps": "0",
            "model": json.dumps(model, separators=(",", ":"))}
    for name, _, _, raw in tensors:
        meta["crc32c." + name] = "%08x" % crc32c(raw)
    pairs = sorted(meta.items())
    meta["crc32c.__metadata__"] = "%08x" % crc32c(
        b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in pairs))
    return safetensors(tensors, meta)


GPT2 = {"small": (12, 12, 768), "xl": (48, 25, 1600)}


def declare(out, size="small"):
    layers, heads, embd = GPT2[size]
    model = {"type": "gpt2", "n_layer": layers, "n_head": heads, "n_embd": embd,
             "vocab_size": 50257, "block_size": 1024}
    raw = struct.pack("<8192f", *([0.01] * 8192))
    with open(out, "wb") as f:
        f.write(checkpoint([("transformer.wte.weight", "F32", [8192], raw)], model))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "declare":
        declare(*sys.argv[2:4])
    else:
        sys.exit(__doc__)
