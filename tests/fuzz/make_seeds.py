#!/usr/bin/env python3
"""make_seeds.py - writes the seed corpora of fuzz_safetensors, fuzz_idx, fuzz_ckpt and
fuzz_report_progress.

Standard library only, so the seeds can be remade on any machine:
    python3 tests/fuzz/make_seeds.py
Each seed is small (well under 4 KB): the fuzzer mutates them, and a seed that
already passes the reader's checks lets it start past them.  The corrupt seeds
stand at the edges the readers check (lengths, offsets, dims).  The found_*
files next to them are inputs the fuzzers found crashing, kept by hand.

Not for test fixtures (tests/fixtures/make_fixtures.py) and not a general
safetensors writer: it writes what dtrain's writer writes, in the same order.
"""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F16": 2, "BF16": 2, "I32": 4, "F32": 4, "F64": 8, "I64": 8}


def safetensors(tensors, meta=None, pad=True):
    """tensors: [(name, dtype, shape, bytes)] -> a file laid out as the reference writer does."""
    order = sorted(tensors, key=lambda t: (-SIZES[t[1]], t[0]))
    header, off, data = {}, 0, b""
    if meta:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in order:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def crc32c(b):
    crc = 0xFFFFFFFF
    for x in b:
        crc ^= x
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors_seeds():
    t = "fuzz_safetensors"
    write(t, "empty", safetensors([]))
    write(t, "meta_only", safetensors([], {"framework": "pt"}))
    # The reference implementation's own vector (safetensors/src/tensor.rs).
    write(t, "attn", safetensors([("attn.0", "F32", [1, 2, 3], f32(0, 1, 2, 3, 4, 5))]))
    write(t, "mixed", safetensors([
        ("w", "F32", [2, 2], f32(1, 2, 3, 4)),
        ("scalar", "F64", [], struct.pack("<d", 0.5)),
        ("empty", "BF16", [0, 3], b""),
        ("ids", "I64", [2], struct.pack("<2q", -1, 7)),
        ("mask", "BOOL", [3], b"\x01\x00\x01"),
        ("caf\u00e9 \"q\"\\", "U8", [1, 1, 1, 1, 1, 1, 1, 1], b"\x2a"),
    ], {"step": "42", "esc": "a\"b\\c\n\u00e9\u2603"}))
    good = safetensors([("a", "F32", [2], f32(1, 2))])
    write(t, "bad_truncated", good[:-3])
    write(t, "bad_header_len", struct.pack("<Q", 1 << 20) + good[8:])
    write(t, "bad_shape", good.replace(b"[2]", b"[3]"))
    write(t, "bad_gap", good.replace(b"[0,8]", b"[4,8]"))
    write(t, "bad_trailing", good + b"\0\0\0\0")
    write(t, "bad_escape", safetensors([("\x01", "F32", [1], f32(1))]).replace(b"\\u0001", b"\\u00g1"))
    # A header whose last byte is a digit, with no data after it.
    h = b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'[:-3]
    write(t, "bad_ends_in_digit", struct.pack("<Q", len(h)) + h)


def idx(dims, body):
    return bytes([0, 0, 8, len(dims)]) + struct.pack(">%dI" % len(dims), *dims) + body


def idx_seeds():
    t = "fuzz_idx"
    images = idx([3, 28, 28], bytes((i * 7) & 0xFF for i in range(3 * 28 * 28)))
    labels = idx([3], b"\x09\x00\x03")
    write(t, "images3", images)
    write(t, "labels3", labels)
    write(t, "images3.gz", gzip.compress(images, mtime=0))
    write(t, "labels3.gz", gzip.compress(labels, mtime=0))
    write(t, "matrix2", idx([2, 3], b"abcdef"))
    write(t, "dims4", idx([1, 2, 1, 2], b"wxyz"))
    write(t, "zero_dim", idx([0, 28, 28], b""))
    write(t, "bad_truncated", images[:100])
    write(t, "bad_header", images[:10])
    write(t, "bad_trailing", labels + b"\x01")
    write(t, "bad_huge_dims", idx([0x7FFFFFFF, 28, 28], b"\0" * 16))
    write(t, "bad_truncated.gz", gzip.compress(labels, mtime=0)[:-6])
    # a small gzip bomb: the header's 3 labels, then members of zeros past them
    write(t, "bad_bomb_members.gz", gzip.compress(idx([3], b""), mtime=0) +
          gzip.compress(b"\0" * 65536, compresslevel=9, mtime=0) * 16)


def meta_crc(meta):
    """worker/ckpt.c's "crc32c.__metadata__": every other pair, sorted by key, as key NUL value NUL."""
    pairs = sorted((k, v) for k, v in meta.items() if k != "crc32c.__metadata__")
    return "%08x" % crc32c(b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in pairs))


def ckpt(amp=None, step=3, with_meta_crc=False):
    """A checkpoint of fuzz_ckpt.c's 2-3-2 MLP as dt_ckpt_save writes it (seed 5, 4 ranks, batch 32);
    without with_meta_crc, as a dtrain from before the metadata's checksum wrote it."""
    n = 3 * 2 + 3 + 2 * 3 + 2
    # Values that differ per step, so that a refused file that wrote into the
    # model anyway shows (the target compares the model before and after).
    tensors = [
        ("layers.0.weight", "F32", [3, 2], f32(*[0.1 * i + step for i in range(6)])),
        ("layers.0.bias", "F32", [3], f32(0.5, -0.5, step)),
        ("layers.2.weight", "F32", [2, 3], f32(*[-0.2 * i - step for i in range(6)])),
        ("layers.2.bias", "F32", [2], f32(1, -step)),
        ("optimizer.exp_avg", "F32", [n], f32(*[0.01 * step] * n)),
        ("optimizer.exp_avg_sq", "F32", [n], f32(*[0.001 * step] * n)),
    ]
    meta = {"format": "dtrain-trainer-1", "step": str(step), "epoch": "1", "batch": "2", "seed": "5",
            "world": "4", "batch_size": "32", "adamw_step": str(step)}
    if amp == "off":  # dt_ckpt_save writes the (idle) scaler of an fp32 run too
        meta.update({"amp": amp, "loss_scale": "1", "growth_tracker": "0", "skipped_steps": "0"})
    elif amp:
        meta.update({"amp": amp, "loss_scale": "65536", "growth_tracker": "7", "skipped_steps": "1"})
    for name, _, _, raw in tensors:
        meta["crc32c." + name] = "%08x" % crc32c(raw)
    if with_meta_crc:
        meta["crc32c.__metadata__"] = meta_crc(meta)
    return safetensors(tensors, meta)


def ckpt_seeds():
    t = "fuzz_ckpt"
    write(t, "fp32", ckpt("off"))
    write(t, "bf16", ckpt("bf16", 9))
    write(t, "before_amp", ckpt(None, 5))  # files from before AMP have no "amp" key
    write(t, "fp32_meta_crc", ckpt("off", 4, with_meta_crc=True))
    write(t, "bf16_meta_crc", ckpt("bf16", 9, with_meta_crc=True))
    damaged = bytearray(ckpt("off"))
    damaged[-1] ^= 1  # a flipped bit in the last moment
    write(t, "bad_crc", bytes(damaged))


def row(step, total=12, gpu=None, **extra):
    """A metrics.jsonl training row as worker/metrics.c writes it; gpu: the (utilisation, memory) lists."""
    r = ('{"step": %d, "epoch": %.6g, "loss": %.9g, "lr": 0.001, "beta1": 0.9, "grad_norm": 1.62112949, '
         '"samples_per_s": 14857.2845, "time_s": 0.017, "total_steps": %d, "data_s": 0.0001564415, '
         '"forward_s": 0.001694954, "backward_s": 0.000120364, "comm_wait_s": 0.006256394, '
         '"optimizer_s": 4.19325e-05' % (step, step / 469.0, 2.3 / (1 + step), total))
    if gpu:
        r += ', "gpu_util_pct": [%s], "gpu_mem_mib": [%s]' % gpu
    for k, v in extra.items():
        r += ', "%s": %s' % (k, v)
    return r + "}\n"


def progress_seeds():
    """Appends cut at form feeds; a part that starts with \v truncates the file, \a replaces it."""
    t = "fuzz_report_progress"
    ev = '{"step": 12, "epoch": 1, "test_loss": 1.21721135, "test_accuracy": 0.6553}\n'
    r = [row(s) for s in (2, 4, 6, 8, 10, 12)]
    write(t, "run", "\f".join([r[0], r[1][:40], r[1][40:] + r[2], r[3], r[4] + r[5] + ev, ""]).encode())
    write(t, "all_at_once", "".join(r).encode())
    gpu = [row(2, gpu=("80, 90, null", "1000, 3072, null")), row(4, gpu=("95, null", "1100, null")), row(6)]
    write(t, "gpu", "\f".join(gpu).encode())
    write(t, "restart_goes_back", "\f".join([r[0], r[1], r[2], r[1], r[2] + r[3]]).encode())
    write(t, "truncated_and_replaced",
          "\f".join([r[0] + r[1], "\v" + r[2], r[3], "\a" + r[4][:30], r[4][30:]]).encode())
    write(t, "huge_and_negative", "\f".join([
        row(2), row(4, total=10 ** 30, loss="1e999"), '{"step": 1e300, "total_steps": 1e999}\n',
        '{"step": -5, "loss": -1e308, "samples_per_s": 1e300, "epoch": 1e200}\n',
        '{"step": 9007199254740993, "total_steps": 9223372036854775808, "lr": 1e999}\n',
        row(6, gpu=("1e308, 1e308", "1e308, 1e999"), test_accuracy="1e999")]).encode())


if __name__ == "__main__":
    assert crc32c(b"123456789") == 0xE3069283
    safetensors_seeds()
    idx_seeds()
    ckpt_seeds()
    progress_seeds()
