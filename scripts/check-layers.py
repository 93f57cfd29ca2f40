#!/usr/bin/env python3
"""check-layers.py - the include rules of docs/architecture.md, checked.

dtrain's folders are layers, and which folder's files may include which
folder's headers is a table, scripts/layers.txt: one line per folder, the
folder and the folders it may include (its own always).  A file belongs to the
longest folder of the table that holds it (launcher/agent/, not launcher/).
A C, C++ or CUDA file may include ("folder/file.h") headers of its own folder
or of one its line names, no other.  Besides:
  - the table has no cycle: its edges point down;
  - docs/architecture.md draws exactly the table: each of its lines
    "FOLDER/ ─► A/ B/ ..." (with the indented lines of folders right after it)
    is one folder's edges, every folder of the table has one, and no edge is
    drawn that the table lacks, or left out that it has;
  - a communicator backend (a subfolder of comm/: tcp, shm, nccl, mpi) includes
    no other backend;
  - outside comm/, a backend is reached only through comm/'s public headers; the
    one exception is a backend's public device header (comm/nccl/nccl_comm.h:
    the streams a GPU trainer orders its kernels and collectives on);
  - every quoted include names a file that exists;
  - a comment that names a file of the tree (a path under one of the layer
    folders, tests/, bench/, scripts/, docs/, or a bare name such as
    agent_rounds.c) names one that exists: a comment pointing at a file
    that moved or went is the commonest stale comment.

    scripts/check-layers.py [ROOT] [--table FILE] [--doc FILE]
        prints one line per broken rule; exit 1 if any.  The table is
        ROOT/scripts/layers.txt, the drawing ROOT/docs/architecture.md; a ROOT
        without them (a test's made-up tree) is checked against this
        checkout's table, and without a drawing to compare.
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP_DIRS = ("base", "spec", "comm", "worker", "scheduler-adapters", "launcher")
BACKENDS = ("tcp", "shm", "nccl", "mpi")
DEVICE_HEADERS = {"comm/nccl/nccl_comm.h"}
SOURCE = re.compile(r".*\.(c|h|cu|cuh|cpp)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
DRAWN = re.compile(r"^\s*([\w./-]+/)\s+─►\s*(.*)$")
MORE = re.compile(r"^\s+((?:[\w./-]+/\s*)+)$")
TREE_DIRS = TOP_DIRS + ("tests", "bench", "scripts", "docs", "configs", "examples")
PATH_REF = re.compile(r"(?<![\w./-])((?:%s)/[\w/.-]*\w\.(?:c|h|cu|cuh|md|sh|py|yaml|json|txt))\b" %
                      "|".join(re.escape(d) for d in TREE_DIRS))
NAME_REF = re.compile(r"(?<![\w./-])([A-Za-z][\w-]*\.(?:c|h|cu|cuh))\b")
# Files of other projects that comments cite by name.
FOREIGN = {"llm.c", "train_gpt2.c", "sysexits.h", "cublasLt.h", "nvml.h", "cmocka.h", "nccl.h", "mpi.h",
           "cuda_runtime.h", "cuda_runtime_api.h", "uv.h", "yaml.h", "jansson.h", "zlib.h", "cblas.h"}


def read_table(path):
    """{folder: set of folders it may include}, and the problems of the file itself."""
    table, problems = {}, []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] in table:
                problems.append(f"{path}:{n}: {words[0]} has a second line")
            table[words[0]] = set(words[1:])
    for folder, edges in table.items():
        for to in sorted(edges - set(table)):
            problems.append(f"{path}: {folder} may include {to}, which has no line of its own")
    return table, problems + cycles(table, path)


def cycles(table, path):
    """A cycle in the table, as a sentence; none when the edges point down."""
    state = {}

    def visit(node, trail):
        state[node] = "open"
        for to in sorted(table.get(node, ())):
            if state.get(to) == "open":
                loop = trail[trail.index(to):] + [to]
                return [f"{path}: the edges go round ({' -> '.join(loop)}); layers only point down"]
            if to not in state:
                found = visit(to, trail + [to])
                if found:
                    return found
        state[node] = "done"
        return []

    for node in sorted(table):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return []


def folder_of(table, rel):
    """The longest folder of the table that holds rel, or None."""
    best = None
    for folder in table:
        if rel.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def check_drawing(table, doc, shown_as):
    """Where the drawing in doc and the table disagree."""
    drawn, last = {}, None
    with open(doc, encoding="utf-8") as f:
        for line in f:
            m, more = DRAWN.match(line), MORE.match(line)
            if m:
                last = m.group(1).rstrip("/")
                drawn[last] = set()
                words = m.group(2)
            elif more and last:
                words = more.group(1)
            else:
                last = None
                continue
            drawn[last] |= {w.rstrip("/") for w in words.split() if w.endswith("/")}
    problems = []
    for folder in sorted(set(table) | set(drawn)):
        if folder not in drawn:
            problems.append(f"{shown_as}: draws no line for {folder}/, which the table has")
        elif folder not in table:
            problems.append(f"{shown_as}: draws {folder}/, which the table does not have")
        else:
            for to in sorted(drawn[folder] - table[folder]):
                problems.append(f"{shown_as}: draws {folder}/ ─► {to}/, an edge the table does not have")
            for to in sorted(table[folder] - drawn[folder]):
                problems.append(f"{shown_as}: does not draw {folder}/ ─► {to}/, an edge of the table")
    return problems


def backend_of(path):
    parts = path.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "comm" and parts[1] in BACKENDS else None


def check_file(root, rel, table):
    """The broken rules of one file, as sentences."""
    own = folder_of(table, rel)
    if own is None:
        return []
    problems = []
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        text = f.read()
    for m in INCLUDE.finditer(text):
        inc = m.group(1)
        where = f"{rel}:{text.count(chr(10), 0, m.start()) + 1}"
        if not os.path.isfile(os.path.join(root, inc)):
            if "/" in inc:
                problems.append(f"{where}: includes \"{inc}\", which does not exist")
            continue
        to = folder_of(table, inc)
        if to is not None and to != own and to not in table[own]:
            allowed = " ".join(f"{t}/" for t in sorted(table[own])) or "nothing but itself"
            problems.append(f"{where}: {own}/ includes \"{inc}\" of {to}/, an edge the layer table "
                            f"does not have ({own}/ may include {allowed}: scripts/layers.txt)")
        b_own, b_inc = backend_of(rel), backend_of(inc)
        if b_inc and b_own and b_inc != b_own:
            problems.append(f"{where}: backend {b_own} includes \"{inc}\" of backend {b_inc}; backends never "
                            "include each other")
        if b_inc and not rel.startswith("comm/") and inc not in DEVICE_HEADERS:
            problems.append(f"{where}: includes \"{inc}\", inside the {b_inc} backend; outside comm/ a backend "
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


def arguments(argv):
    root, table, doc, rest = ".", None, None, list(argv)
    while rest:
        a = rest.pop(0)
        if a in ("--table", "--doc") and rest:
            if a == "--table":
                table = rest.pop(0)
            else:
                doc = rest.pop(0)
        else:
            root = a
    if table is None:
        own = os.path.join(root, "scripts", "layers.txt")
        table = own if os.path.isfile(own) else os.path.join(HERE, "layers.txt")
    if doc is None and os.path.isfile(os.path.join(root, "docs", "architecture.md")):
        doc = os.path.join(root, "docs", "architecture.md")
    return root, table, doc


def main():
    root, table_path, doc = arguments(sys.argv[1:])
    table, problems = read_table(table_path)
    if doc:
        problems += check_drawing(table, doc, os.path.relpath(doc, root) if doc.startswith(root) else doc)
    sources, names = [], set()
    for top in TREE_DIRS:
        for d, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                names.add(name)
                if SOURCE.match(name):
                    sources.append(os.path.relpath(os.path.join(d, name), root))
    for rel in sources:
        problems += check_file(root, rel, table)
        problems += check_comments(root, rel, names)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
