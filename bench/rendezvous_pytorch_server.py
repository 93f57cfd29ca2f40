"""rendezvous_pytorch_server.py - PyTorch's libuv TCPStore server, the peer of bench/rendezvous.sh.

Starts torch.distributed.TCPStore(is_master=True, use_libuv=True) on a free
port of 127.0.0.1, prints the port, and serves until stdin closes (the
benchmark closes it) or 600 s pass.  Not a client: the clients are the same
C program for both servers.
"""
import datetime
import sys
import threading

import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=600))
print(store.port, flush=True)
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
done.wait(600)
