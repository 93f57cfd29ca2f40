"""gloo_allreduce.py - the Gloo peer of bench/allreduce.sh: torch.distributed
all_reduce (float32, sum, in place, CPU, Gloo) over a size sweep, timed like
dtrain bench, printing "size time_us busbw_GBps" rows on rank 0.

Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set:
    python3 gloo_allreduce.py MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    lo, hi, factor, iters, warmup = (int(a) for a in sys.argv[1:6])
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    buf = torch.zeros(hi // 4, dtype=torch.float32)  # allocated and touched once
    size = lo
    while size <= hi:
        view = buf[: size // 4]
        view.fill_(float(rank % 7))
        for _ in range(warmup):
            dist.all_reduce(view)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(view)
        t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(t)
        avg = t.item() / world
        busbw = size / avg / 1e9 * 2 * (world - 1) / world
        if rank == 0:
            print(f"{size:12d} {avg * 1e6:12.2f} {busbw:8.3f}", flush=True)
        size *= factor
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
