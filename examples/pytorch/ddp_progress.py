"""ddp_progress.py - a PyTorch DDP script that reports its progress to dtrain (docs/progress.md).

    dtrain run -n 2 --auth none examples/pytorch/ddp_progress.py

The same training as ddp_gloo.py, plus python/dtrain_progress.py: every rank writes a row per
step (its heartbeat, so a rank that stops stepping is declared hung and dtrain's report shows
where its Python threads were), and rank 0's rows become dtrain's live line, `dtrain status`'s
step, metrics.jsonl for `dtrain report` and TensorBoard scalars in the run directory.  Under
torchrun or plain python the progress calls do nothing.
"""
import gc
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

# The helper is one standard-library file: here from this checkout's python/ folder (an
# installed dtrain has it in <prefix>/share/dtrain/python/); copying it next to a script works too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from dtrain_progress import Progress  # noqa: E402


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)

    gen = torch.Generator().manual_seed(1000 + rank)
    w_true = torch.arange(16, dtype=torch.float32) / 16
    steps, batch = int(os.environ.get("STEPS", "60")), 64
    progress = Progress(total_steps=steps)
    start = time.perf_counter()
    for step in range(1, steps + 1):
        x = torch.randn(batch, 16, generator=gen)
        y = (x @ w_true).unsqueeze(1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        rate = step * batch * world / (time.perf_counter() - start)
        progress.step(step, loss=loss.item(), lr=sched.get_last_lr()[0], samples_per_s=rate,
                      epoch=step / steps)
        if step % 20 == 0:
            # Every rank pauses: rank 0 writes while the others wait for it (here in the
            # barrier, in a real job in the next all-reduce), however long that takes.
            with progress.pause("checkpoint"):
                if rank == 0:
                    torch.save(model.module.state_dict(),
                               os.path.join(os.environ.get("DTRAIN_RUN_DIR", "."), "model.pt"))
                dist.barrier()

    with torch.no_grad():
        x = torch.randn(1024, 16, generator=gen)
        test_loss = nn.functional.mse_loss(model(x), (x @ w_true).unsqueeze(1))
    dist.all_reduce(test_loss)
    progress.step(steps, test_loss=test_loss.item() / world)
    print(f"rank {rank}/{world}: loss {loss.item():.4f} test loss {test_loss.item() / world:.4f}", flush=True)
    progress.close()
    dist.barrier()
    # As in ddp_gloo.py: free DDP and the collectives' tensors before the group, so no Gloo
    # thread frees a Python tensor during interpreter teardown (an abort).
    del model, opt, sched, loss, test_loss
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
