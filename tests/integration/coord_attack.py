"""coord_attack.py - the clients of issue 26's attacks on a coordinator, for
tests/integration/test_coord_attacks.sh, which measures the coordinator's
memory and CPU while they run.  Standard library only.

    coord_attack.py preauth PORT SECONDS       no token: idle, slow, large frames
    coord_attack.py slow PORT SECONDS          3 slow senders of 131072-key requests
    coord_attack.py pipeline PORT              200 GETs of an 8 MiB value, never read
    coord_attack.py mget PORT                  MULTI_GETs of large values, then leave
    coord_attack.py nine PORT COUNT            VALIDATE then PING, COUNT times
    coord_attack.py flood PORT SECONDS RATE    RATE connects a second that never speak
    coord_attack.py waits PORT MAX             with the token: WAITs on 131072 fresh keys each,
                                               on up to MAX connections, until one is refused
The token comes from DTRAIN_JOB_TOKEN.  Each prints one line saying what it
did; the shell test does the checking.

Not a client library: the wire format is written out by hand (comm/store_wire.h).
"""
import os
import socket
import struct
import sys
import time

MAGIC = 0x3C85F7CE
VALIDATE, SET, GET, WAIT, MULTI_GET, MULTI_SET, PING, AUTH = 0, 1, 3, 6, 10, 11, 13, 0xD0


def s(b):
    return struct.pack("<Q", len(b)) + b


def connect(port):
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def authed(port):
    c = connect(port)
    c.sendall(bytes([VALIDATE]) + struct.pack("<I", MAGIC) + bytes([AUTH]) + s(os.environ["DTRAIN_JOB_TOKEN"].encode()))
    if c.recv(1) != b"\x00":
        sys.exit("coord_attack: the token was refused")
    return c


def closed(c):
    """True when the coordinator closed the connection (EOF or reset)."""
    c.setblocking(False)
    try:
        return c.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def preauth(port, seconds):
    """200 connections that never speak, 20 that send a handshake a byte
    every 0.4 s, 10 that start a 7 x 8 MiB MULTI_SET and 10 that hold back
    the last byte of AUTH: none of them has the token.  Only the MULTI_SETs
    are closed at once; the others hold at most 128 bytes each until the
    10 s handshake deadline, which outlasts the attack."""
    idle = [connect(port) for _ in range(200)]
    slow = [connect(port) for _ in range(20)]
    big = []
    for _ in range(10):
        c = connect(port)
        try:
            c.sendall(bytes([VALIDATE]) + struct.pack("<I", MAGIC) + bytes([MULTI_SET]) + struct.pack("<Q", 7)
                      + s(b"/k") + struct.pack("<Q", 8 << 20) + b"v" * (8 << 20))
        except OSError:
            pass
        big.append(c)
    partial = []
    for _ in range(10):
        c = connect(port)
        c.sendall(bytes([VALIDATE]) + struct.pack("<I", MAGIC) + bytes([AUTH]) + s(b"f" * 64)[:-1])
        partial.append(c)
    end = time.time() + seconds
    # A handshake that would be valid, but for the token, a byte at a time.
    hello = bytes([VALIDATE]) + struct.pack("<I", MAGIC) + bytes([AUTH]) + s(b"f" * 64)
    i = 0
    while time.time() < end:
        for c in slow:
            try:
                c.send(hello[i:i + 1])
            except OSError:
                pass
        i += 1
        time.sleep(0.4)
    groups = {"idle": idle, "slow": slow, "large-frame": big, "partial-auth": partial}
    print(" ".join("%s=%d/%d" % (k, sum(closed(c) for c in v), len(v)) for k, v in groups.items()), "closed")


def slow(port, seconds):
    """Three clients with the token send a MULTI_GET of 131072 keys: the
    first half at once, the rest 64 bytes at a time until `seconds` pass."""
    keys = b"".join(s(b"/k%06d" % i) for i in range(131072))
    req = bytes([MULTI_GET]) + struct.pack("<Q", 131072) + keys
    conns = [authed(port) for _ in range(3)]
    half = len(req) // 2
    for c in conns:
        c.sendall(req[:half])
    rest = len(req) - half
    step = max(64, rest // int(seconds / 0.002))
    sent, chunks = half, 0
    while sent < len(req):
        for c in conns:
            c.sendall(req[sent:sent + step])
        sent += step
        chunks += 1
        time.sleep(0.002)
    for c in conns:  # the answer: 131072 empty values
        c.settimeout(10)
        got = 0
        while got < 131072 * 8:
            b = c.recv(1 << 20)
            if not b:
                sys.exit("coord_attack: a slow sender was disconnected")
            got += len(b)
    print("3 slow senders of 131072-key requests, %d pieces each, answered" % chunks)


def set_value(c, key, n):
    c.sendall(bytes([SET]) + s(key) + s(b"v" * n))


def pipeline(port):
    c = authed(port)
    set_value(c, b"/big", 8 << 20)
    r = authed(port)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    r.sendall((bytes([GET]) + s(b"/big")) * 200)
    time.sleep(1.5)
    print("200 GETs of an 8 MiB value sent, answers not read")
    sys.stdout.flush()
    time.sleep(float(os.environ.get("HOLD_S", "2")))


def mget(port):
    """Three 8 MiB values; a MULTI_GET naming them 12 times (a 96 MiB
    answer), then five clients that each read a 40 MiB answer and leave."""
    c = authed(port)
    for k in (b"/m0", b"/m1", b"/m2"):
        set_value(c, k, 8 << 20)
    big = authed(port)
    big.sendall(bytes([MULTI_GET]) + struct.pack("<Q", 12) + b"".join(s(b"/m%d" % (i % 3)) for i in range(12)))
    big.settimeout(5)
    refused = big.recv(1) == b""
    keys = [b"/m0", b"/m1", b"/m2", b"/m0", b"/m1"] + [b"/absent%d" % i for i in range(11)]
    req = bytes([MULTI_GET]) + struct.pack("<Q", len(keys)) + b"".join(s(k) for k in keys)
    for _ in range(5):
        r = authed(port)
        r.sendall(req)
        r.settimeout(10)
        want, got = 5 * ((8 << 20) + 8) + 11 * 8, 0
        while got < want:
            b = r.recv(1 << 20)
            if not b:
                sys.exit("coord_attack: a 40 MiB MULTI_GET was not answered")
            got += len(b)
        r.close()
    print("96 MiB MULTI_GET %s; five 40 MiB MULTI_GETs answered" % ("refused" if refused else "ANSWERED"))


def nine(port, count):
    n = 0
    for _ in range(count):
        try:
            c = connect(port)
            c.sendall(bytes([VALIDATE]) + struct.pack("<I", MAGIC) + bytes([PING]) + struct.pack("<I", 7))
            c.settimeout(3)
            n += c.recv(1) == b""
            c.close()
        except OSError:
            n += 1
    print("%d of %d VALIDATE+PING connections closed by the coordinator" % (n, count))


def flood(port, seconds, rate):
    """Opens RATE connections a second for `seconds` and keeps them open
    without a byte: each holds a pre-authentication slot until the
    coordinator closes it.  Non-blocking connects, so the pace holds
    whatever the coordinator does."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = int(rate * 12) + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    conns, n, failed = [], 0, 0
    t0 = time.time()
    while time.time() - t0 < seconds:
        due = int((time.time() - t0) * rate)
        while n < due:
            n += 1
            try:
                c = socket.socket()
                c.setblocking(False)
                c.connect_ex(("127.0.0.1", port))
                conns.append(c)
            except OSError:
                failed += 1
        if len(conns) > want - 64 - rate:  # the oldest were closed by the coordinator long ago
            for c in conns[:rate]:
                c.close()
            del conns[:rate]
        time.sleep(0.002)
    print("flood: %d connects in %.0f s (%d failed)" % (n, seconds, failed))


def waits(port, most):
    """Each connection WAITs on 131072 keys no one sets (12 bytes each):
    every one costs the coordinator a waiting entry, until its memory
    budget refuses the next WAIT by closing that connection."""
    held, refused = [], False
    while len(held) < most and not refused:
        c = authed(port)
        c.sendall(bytes([WAIT]) + struct.pack("<Q", 131072)
                  + b"".join(s(b"/w%04d-%06d" % (len(held), i)) for i in range(131072)))
        deadline = time.time() + 10
        while time.time() < deadline and not refused:
            time.sleep(0.05)
            refused = closed(c)
            c.setblocking(True)
            if not refused:
                break
        held.append(c)
    print("%d WAITs of 131072 keys held; %s" % (len(held) - refused,
                                                 "the next was refused" if refused else "none refused"))
    sys.stdout.flush()
    time.sleep(float(os.environ.get("HOLD_S", "1")))


if __name__ == "__main__":
    cmd, port = sys.argv[1], int(sys.argv[2])
    if cmd == "preauth":
        preauth(port, float(sys.argv[3]))
    elif cmd == "slow":
        slow(port, float(sys.argv[3]))
    elif cmd == "pipeline":
        pipeline(port)
    elif cmd == "mget":
        mget(port)
    elif cmd == "nine":
        nine(port, int(sys.argv[3]))
    elif cmd == "waits":
        waits(port, int(sys.argv[3]))
    elif cmd == "flood":
        flood(port, float(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit("coord_attack: unknown attack " + cmd)
