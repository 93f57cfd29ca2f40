#!/usr/bin/env python3
"""check-layers.py - the include rules of docs/architecture.md, checked.

dtrain's folders are layers that only point down:

    1 base/   2 spec/   3 comm/   4 worker/   5 scheduler-adapters/   6 launcher/

A C, C++ or CUDA file in a layer may include ("folder/file.h") headers of its
own layer or a lower one, never a higher one.  Besides:
  - a communicator backend (a subfolder of comm/: tcp, shm, nccl, mpi) includes
    no other backend;
  - above comm/, a backend is reached only through comm/'s public headers; the
    one exception is a backend's public device header (comm/nccl/nccl_comm.h:
    the streams a GPU trainer orders its kernels and collectives on);
  - every quoted include names a file that exists;
  - a comment that names a file of the tree (a path under one of the layer
    folders, tests/, bench/, scripts/, docs/, or a bare name such as
    agent_rounds.c) names one that exists: a comment pointing at a file
    that moved or went is the commonest stale comment.

    scripts/check-layers.py [ROOT]     prints one line per broken rule; exit 1 if any
"""
import os
import re
import sys

LAYERS = {"base": 1, "spec": 2, "comm": 3, "worker": 4, "scheduler-adapters": 5, "launcher": 6}
BACKENDS = ("tcp", "shm", "nccl", "mpi")
DEVICE_HEADERS = {"comm/nccl/nccl_comm.h"}
SOURCE = re.compile(r".*\.(c|h|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
TREE_DIRS = tuple(LAYERS) + ("tests", "bench", "scripts", "docs", "configs", "examples")
PATH_REF = re.compile(r"(?<![\w./-])((?:%s)/[\w/.-]*\w\.(?:c|h|cu|cuh|md|sh|py|yaml|json))\b" %
                      "|".join(re.escape(d) for d in TREE_DIRS))
NAME_REF = re.compile(r"(?<![\w./-])([A-Za-z][\w-]*\.(?:c|h|cu|cuh))\b")
# Files of other projects that comments cite by name.
FOREIGN = {"llm.c", "train_gpt2.c", "sysexits.h", "cublasLt.h", "nvml.h", "cmocka.h", "nccl.h", "mpi.h",
           "cuda_runtime.h", "cuda_runtime_api.h", "uv.h", "yaml.h", "jansson.h", "zlib.h", "cblas.h"}


def backend_of(path):
    parts = path.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "comm" and parts[1] in BACKENDS else None


def check_file(root, rel):
    """The broken rules of one file, as sentences."""
    own = LAYERS.get(rel.split("/")[0])
    if own is None:
        return []
    problems = []
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        text = f.read()
    for m in INCLUDE.finditer(text):
        inc = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        where = f"{rel}:{line}"
        if not os.path.isfile(os.path.join(root, inc)):
            if "/" in inc:
                problems.append(f"{where}: includes \"{inc}\", which does not exist")
            continue
        layer = LAYERS.get(inc.split("/")[0])
        if layer is None:
            continue
        if layer > own:
            problems.append(f"{where}: {rel.split('/')[0]}/ (layer {own}) includes \"{inc}\" from "
                            f"{inc.split('/')[0]}/ (layer {layer}); layers only point down")
        b_own, b_inc = backend_of(rel), backend_of(inc)
        if b_inc and b_own and b_inc != b_own:
            problems.append(f"{where}: backend {b_own} includes \"{inc}\" of backend {b_inc}; backends never "
                            "include each other")
        if b_inc and own > LAYERS["comm"] and inc not in DEVICE_HEADERS:
            problems.append(f"{where}: includes \"{inc}\", inside the {b_inc} backend; above comm/ a backend "
                            "is reached through comm/comm.h")
    return problems


def check_comments(root, rel, names):
    """Files of the tree that a comment of rel names but that do not exist."""
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        text = f.read()
    problems = []
    for c in COMMENT.finditer(text):
        line = text.count("\n", 0, c.start()) + 1
        for m in PATH_REF.finditer(c.group(0)):
            if not os.path.exists(os.path.join(root, m.group(1))):
                problems.append(f"{rel}:{line}: a comment names {m.group(1)}, which does not exist")
        for m in NAME_REF.finditer(c.group(0)):
            if m.group(1) not in names and m.group(1) not in FOREIGN:
                problems.append(f"{rel}:{line}: a comment names {m.group(1)}; no file of the tree has that name")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    sources, names = [], set()
    for top in TREE_DIRS:
        for d, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                names.add(name)
                if SOURCE.match(name):
                    sources.append(os.path.relpath(os.path.join(d, name), root))
    problems = []
    for rel in sources:
        problems += check_file(root, rel)
        problems += check_comments(root, rel, names)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
