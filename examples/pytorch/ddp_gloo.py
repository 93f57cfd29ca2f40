"""ddp_gloo.py - a plain PyTorch DDP training script, as a user would write it for torchrun.

Nothing in it knows about dtrain: init_process_group("gloo") reads MASTER_ADDR,
MASTER_PORT, RANK and WORLD_SIZE from the environment (env://), exactly as under
torchrun.  `dtrain launch examples/pytorch/job.yaml` runs it; so would
`torchrun --nproc_per_node 4 examples/pytorch/ddp_gloo.py`.

It fits a small MLP to a synthetic regression problem, each rank on its own
shard, and at the end checks what DDP promises: every rank holds the same
parameters.  Prints one line per rank with the final loss and a parameter
checksum.
"""
import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own data shard
    w_true = torch.arange(16, dtype=torch.float32) / 16
    steps = int(os.environ.get("STEPS", "30"))
    for step in range(steps):
        x = torch.randn(64, 16, generator=gen)
        y = (x @ w_true).unsqueeze(1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(g, flat) for g in gathered)
    print(f"rank {rank}/{world}: loss {loss.item():.4f} checksum {flat.sum().item():.6f} "
          f"replicas {'identical' if same else 'DIFFER'}", flush=True)
    dist.barrier()
    # Free everything that holds the process group or a tensor a collective used (DDP's module
    # and its reference cycles, the gathered tensors), then destroy the group, while the
    # interpreter is whole. Gloo's worker threads drop finished collectives a moment after the
    # caller returns; a tensor made in Python needs the GIL to be freed, and a thread that asks
    # for it during interpreter teardown ends the process: "terminate called without an active
    # exception" (PyTorch's known Gloo exit race, pytorch/pytorch#179291).
    del model, opt, loss, gathered, flat
    gc.collect()
    dist.destroy_process_group()
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
