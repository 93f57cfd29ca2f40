"""fault_torch.py - a PyTorch DDP script (Gloo, env://) that misbehaves on request, for test_fault.sh.

It is an ordinary script as dtrain runs any command: dtrain sends it no heartbeat
and knows nothing of its steps.  On the first attempt only (DTRAIN_RESTART_COUNT
0), rank FAULT_RANK does FAULT ("stop": SIGSTOP itself; "exit:N": exit with
status N) at step FAULT_STEP, after printing the wall-clock time on stderr.  On
a restart it trains to the end and prints one line per rank with its checksum.
"""
import gc
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1000 + rank)
    fault = os.environ.get("FAULT", "")
    first = os.environ.get("DTRAIN_RESTART_COUNT", "0") == "0"
    mine = rank == int(os.environ.get("FAULT_RANK", "-1"))
    for step in range(int(os.environ.get("STEPS", "20"))):
        if fault and mine and step == int(os.environ.get("FAULT_STEP", "5")):
            if fault.startswith("exit:"):
                print(f"fault: rank {rank} exits {fault[5:]} at step {step}", file=sys.stderr, flush=True)
                sys.exit(int(fault[5:]))
            if fault == "stop" and first:
                print(f"fault: rank {rank} SIGSTOP at step {step} at unix time {time.time():.3f}",
                      file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
        x = torch.randn(32, 8, generator=gen)
        loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    print(f"rank {rank}/{world}: done, checksum {flat.sum().item():.6f}", flush=True)
    dist.barrier()
    # As in examples/pytorch/ddp_gloo.py: free DDP first, so no Gloo thread frees a Python
    # tensor during interpreter teardown (an abort).
    del model, opt, loss, flat
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
