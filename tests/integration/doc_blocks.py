#!/usr/bin/env python3
"""doc_blocks.py - pulls every fenced block out of Markdown files and checks it.

    doc_blocks.py --dtrain BIN --repo DIR --scratch DIR [--list] FILE.md...

Prints one "ok - " or "not ok - " line per block (tests/integration/test_docs.sh
runs it on README.md and docs/*.md).  Python 3 standard library only.

How a block is checked is said by the first word of its fence's info string:

  ```sh       commands a reader types.  Run as written, in order, one bash
              (set -e, pipefail) per block, in a scratch directory that looks
              like the repository root (bin/dtrain, configs/, examples/,
              scripts/, .venv ... are links to the checkout; runs/ is new).
              The docs write `dtrain` for the binary on PATH, so blocks of
              docs/*.md find it there; README.md's blocks do not (a newcomer
              types bin/dtrain).  .venv/bin is never on PATH: a block that
              needs PyTorch says so itself.
  ```console  a terminal session: lines starting with "$ " are commands, checked
              as a no-run block's are; the other lines are output, not checked.
  ```yaml     a job spec, or a part of one: `dtrain validate` must accept it.  A
              block with a top-level `name:` is a whole job; any other is
              checked inside a minimal job (a name, and `command: ["true"]`
              unless it has a command or trainer).  For each scheduler section
              (slurm, kubernetes, mpirun) and a scheduler other than local,
              `dtrain render SCHEDULER` must write it too.  A block whose first
              line is `# FILE.yaml` is also saved as FILE in the scratch
              directory, for the sh blocks after it.
  ```usage    a command's synopsis: its subcommand and every option it names must
              be in `dtrain COMMAND --help`.
  ```text     output, diagrams, file layouts, JSON excerpts: not checked.

Any other fence (a bare ``` included) fails, so a new block cannot slip through
unchecked.  HTML comments on the lines just above a fence adjust its check:

  <!-- doc-test: no-run: REASON -->    an sh block that needs a cluster, a GPU,
        root or minutes of training: checked without running.  `bash -n`; each
        dtrain command's subcommand and options against its --help; `make`
        targets in the Makefile; a relative program path exists; and where the
        job spec it names is in the scratch directory, `dtrain launch` runs as
        `--dry-run` and `validate`/`render` run.
  <!-- doc-test: quick: ARGS -->       sh: every `dtrain launch` of the block gets
        ARGS appended (e.g. --set trainer.steps=20), to keep a training run short.
  <!-- doc-test: env: NAME=VALUE... --> yaml, sh: environment the block sees.
  <!-- doc-test: set: KEY=VALUE... -->  yaml: `--set KEY=VALUE` for validate and render,
        for a spec that only `dtrain agent` runs (an elastic `nodes: MIN:MAX`).
  <!-- doc-test: parse-only: REASON --> yaml that is not a job spec: only parsed
        (PyYAML).
"""
import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time

CLASSES = ("sh", "console", "yaml", "usage", "text")
FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
# Subcommands whose second word is a subcommand of its own (`dtrain trace merge`).
NESTED = ("trace", "data", "export", "bench")
# Commands whose options end at their program, as torchrun's do.
TAKES_PROGRAM = ("run", "mpirank")
REPO_SKIP = {".git", "bin", "build", "build-asan", "build-fuzz", "runs", "data", "checkpoints"}


class Block:
    def __init__(self, path, line, info, body, directives):
        self.path, self.line, self.info, self.body = path, line, info, body
        self.cls = info.split()[0] if info.split() else ""
        self.directives = directives  # [(key, value)]

    def where(self):
        return "%s:%d" % (self.path, self.line)

    def directive(self, key):
        for k, v in self.directives:
            if k == key:
                return v
        return None


def extract(path, text):
    """Every fenced block of a Markdown file, with the directives just above it; and the lines of
    directives that are above no fence (a misplaced one would silently not apply)."""
    lines = text.split("\n")
    blocks, i, attached = [], 0, set()
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        directives, k = [], i - 1
        while k >= 0 and DIRECTIVE.match(lines[k]):
            d = DIRECTIVE.match(lines[k]).group(1)
            key, _, value = d.partition(":")
            directives.insert(0, (key.strip(), value.strip()))
            attached.add(k)
            k -= 1
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence))
                                      and lines[j].strip().strip(fence[0]) == ""):
            j += 1
        body = [ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[i + 1:j]]
        blocks.append(Block(path, i + 1, info, "\n".join(body) + "\n", directives))
        i = j + 1
    orphans = [n + 1 for n, ln in enumerate(lines) if "doc-test:" in ln and n not in attached]
    return blocks, orphans


class Checker:
    def __init__(self, args):
        self.dtrain, self.repo, self.scratch = args.dtrain, args.repo, args.scratch
        self.helps = {}
        self.failed = 0
        self.counts = {}
        self.timeout = int(args.timeout)
        # The Makefile's targets: the words before the colon of a rule line ("a b: deps", not "A := x").
        with open(os.path.join(self.repo, "Makefile")) as f:
            rules = re.findall(r"^([^\s#:=][^:=]*?)\s*::?(?!=)", f.read(), re.M)
        self.make_targets = {t for r in rules for t in r.split()}
        self.wrapper_dir = os.path.join(self.scratch, "path-bin")
        os.makedirs(self.wrapper_dir, exist_ok=True)
        self.wrapper = os.path.join(self.wrapper_dir, "dtrain")
        # `quick` appends its arguments to `dtrain launch`; the ranks then run the real binary.
        with open(self.wrapper, "w") as f:
            f.write('#!/bin/sh\n'
                    'if [ "$1" = launch ] && [ -n "${DOC_TEST_QUICK:-}" ]; then\n'
                    '  q=$DOC_TEST_QUICK; unset DOC_TEST_QUICK\n'
                    '  eval "set -- \\"\\$@\\" $q"\n'
                    'fi\n'
                    'exec "%s" "$@"\n' % self.dtrain)
        os.chmod(self.wrapper, 0o755)

    # --- reporting -----------------------------------------------------------------
    def report(self, block, good, what, detail=""):
        self.counts[block.cls] = self.counts.get(block.cls, 0) + 1
        if good:
            print("ok - %s %s: %s" % (block.where(), block.cls or "(bare)", what))
        else:
            self.failed += 1
            print("not ok - %s %s: %s" % (block.where(), block.cls or "(bare)", what))
            for ln in detail.rstrip("\n").split("\n")[-25:]:
                if ln:
                    print("    " + ln)

    # --- the scratch directory a doc's blocks run in ---------------------------------
    def workdir(self, path):
        stem = re.sub(r"[^A-Za-z0-9]+", "-", path).strip("-")
        w = os.path.join(self.scratch, stem)
        if os.path.isdir(w):
            return w
        os.makedirs(os.path.join(w, "bin"))
        os.symlink(self.wrapper, os.path.join(w, "bin", "dtrain"))
        for name in os.listdir(self.repo):
            if name not in REPO_SKIP:
                os.symlink(os.path.join(self.repo, name), os.path.join(w, name))
        return w

    def env(self, block, dtrain_on_path):
        env = dict(os.environ)
        path = [p for p in env.get("PATH", "").split(":")
                if p and not p.rstrip("/").endswith(".venv/bin")]
        if dtrain_on_path:
            path.insert(0, self.wrapper_dir)
        env["PATH"] = ":".join(path)
        env.pop("DTRAIN_LOG", None)
        env.pop("VIRTUAL_ENV", None)
        for k, v in block.directives:
            if k == "env":
                for item in shlex.split(v):
                    name, _, value = item.partition("=")
                    env[name] = value
        return env

    def run(self, argv, cwd, env, timeout=None, stdin=None):
        """(status, output) of argv; its whole process group is killed at the deadline."""
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                             start_new_session=True)
        try:
            out, _ = p.communicate(stdin.encode() if stdin else None, timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            return 124, out.decode(errors="replace") + "\n(killed after %d s)" % (timeout or self.timeout)
        return p.returncode, out.decode(errors="replace")

    # --- what `dtrain CMD --help` knows --------------------------------------------------
    def help(self, cmd):
        if cmd not in self.helps:
            st, out = self.run([self.dtrain] + ([cmd] if cmd else []) + ["--help"], self.scratch,
                               dict(os.environ), timeout=30)
            known, valued = set(), set()
            # Option lines ("  -o, --output FILE   what it does") say which options take a value.
            for ln in out.split("\n"):
                m = re.match(r"^\s+((?:-{1,2}[A-Za-z][\w-]*(?:\[=[^\]]*\])?(?:, )?)+)"
                             r"(?:( \S+)(?:\s+|$)|\s{2,}|$)", ln)
                if m:
                    names = re.findall(r"-{1,2}[A-Za-z][\w-]*", m.group(1))
                    known.update(names)
                    if m.group(2):
                        valued.update(names)
            # Options named only in the usage line or the prose ("also --nproc_per_node").
            for name, meta in re.findall(r"(?<![\w-])(-{1,2}[A-Za-z][\w-]*)(?:[= ]([A-Z][A-Z0-9_.:|/-]*))?",
                                         out):
                if name not in known:
                    known.add(name)
                    if meta:
                        valued.add(name)
            self.helps[cmd] = (st, out, known | {"-h", "--help"}, valued)
        return self.helps[cmd]

    def check_dtrain_args(self, words):
        """Problems with `dtrain WORDS...`: an unknown subcommand or option."""
        if not words:
            return []
        cmd = words[0]
        if cmd in ("-h", "--help", "--version"):
            return []
        st, out, known, valued = self.help(cmd)
        if st != 0:
            return ["'dtrain %s' is not a command (dtrain %s --help exits %d)" % (cmd, cmd, st)]
        problems, rest = [], words[1:]
        if cmd in NESTED and rest and not rest[0].startswith("-"):
            if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(rest[0]), out):
                problems.append("'dtrain %s %s': %s is not in dtrain %s --help"
                                % (cmd, rest[0], rest[0], cmd))
            rest = rest[1:]
        i = 0
        while i < len(rest):
            w = rest[i]
            if w == "--":
                return problems + self.check_program(rest[i + 1:])
            if w.startswith("-") and len(w) > 1 and not re.match(r"^-[\d.]", w):
                name = w.split("=", 1)[0]
                if name not in known:
                    problems.append("dtrain %s has no option %s (dtrain %s --help)" % (cmd, name, cmd))
                elif name in valued and "=" not in w:
                    i += 1
            elif cmd in TAKES_PROGRAM:
                return problems + self.check_program(rest[i:])
            i += 1
        return problems

    def check_program(self, words):
        for k, w in enumerate(words):
            if w == "dtrain" or w.endswith("/dtrain"):
                return self.check_dtrain_args(words[k + 1:])
        return []

    # --- shell lines ---------------------------------------------------------------------
    @staticmethod
    def commands(text):
        """The simple commands of a shell text, as word lists (redirections dropped)."""
        joined = re.sub(r"\\\n", " ", text)
        cmds = []
        for line in joined.split("\n"):
            lex = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
            lex.whitespace_split = True
            try:
                toks = list(lex)
            except ValueError:
                continue  # bash -n reports what does not parse
            cur, skip = [], False
            for t in toks:
                if skip:
                    skip = False
                elif set(t) <= set("<>&") and set(t) & set("<>"):
                    skip = True
                    if cur and cur[-1].isdigit():
                        cur.pop()
                elif set(t) <= set(";&|()"):
                    if cur:
                        cmds.append(cur)
                    cur = []
                else:
                    cur.append(t)
            if cur:
                cmds.append(cur)
        return cmds

    def static_problems(self, text, w, env, dry_run):
        """What `bash -n` and the commands' own checks say of a shell text that is not run:
        (problems, what was checked)."""
        st, out = self.run(["bash", "-n"], w, env, stdin=text)
        problems, done = ([out.strip()] if st != 0 else []), ["bash -n"]
        for words in self.commands(text):
            while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
                words = words[1:]
            if not words or words[0] in ("export", "case", "esac", "if", "then", "fi", "do", "done"):
                continue
            if words[0] == "make":
                for t in [t for t in words[1:] if not t.startswith("-") and "=" not in t]:
                    if t in self.make_targets:
                        done.append("make target " + t)
                    else:
                        problems.append("make: the Makefile has no target '%s'" % t)
                continue
            prog = words[0]
            if "/" in prog and not prog.startswith(("/", "$")) and not os.path.exists(os.path.join(w, prog)):
                problems.append("%s: no such file in the repository" % prog)
            elif "/" in prog and not prog.startswith(("/", "$")) and not prog.endswith("/dtrain"):
                done.append(prog + " exists")
            for k, t in enumerate(words):
                if t == "dtrain" or t.endswith("/dtrain"):
                    args = words[k + 1:]
                    p = self.check_dtrain_args(args)
                    problems += p
                    ran = self.dry_run(args, w, env) if not p and dry_run else None
                    if ran:
                        problems += ran[1]
                        done.append(ran[0])
                    elif args:
                        done.append("dtrain %s options" % " ".join(args[:2 if args[0] in NESTED else 1]))
                    break
        return problems, done

    def dry_run(self, args, w, env):
        """Run what is cheap of a dtrain command in a no-run block, when its spec is here."""
        if not args or args[0] not in ("launch", "validate", "render") or any("$" in a for a in args):
            return None
        specs = [a for a in args[1:] if a.endswith((".yaml", ".yml")) and not a.startswith("-")]
        if not specs or not all(os.path.isfile(os.path.join(w, s)) for s in specs):
            return None
        argv = [self.dtrain] + args + (["--dry-run"] if args[0] == "launch" else [])
        st, out = self.run(argv, w, env)
        what = "dtrain " + args[0] + (" --dry-run" if args[0] == "launch" else "") + " " + specs[0]
        return what, ([] if st == 0 else ["%s exits %d:\n%s" % (" ".join(["dtrain"] + argv[1:]), st, out)])

    def check_sh(self, b, w, on_path):
        env = self.env(b, on_path)
        reason = b.directive("no-run")
        if reason is not None:
            if not reason:
                return self.report(b, False, "no-run needs a reason: <!-- doc-test: no-run: WHY -->")
            probs, done = self.static_problems(b.body, w, env, dry_run=True)
            checked = ", ".join(dict.fromkeys(done))
            return self.report(b, not probs, "not run (%s); checked: %s" % (reason, checked),
                               "\n".join(probs))
        probs, _ = self.static_problems(b.body, w, env, dry_run=False)
        if probs:
            return self.report(b, False, "does not parse or names what dtrain lacks", "\n".join(probs))
        quick = b.directive("quick")
        if quick:
            env["DOC_TEST_QUICK"] = quick
        script = "set -eo pipefail\n" + b.body
        t0 = time.monotonic()
        st, out = self.run(["bash", "-c", script], w, env)
        first = re.sub(r"\s+#.*", "", b.body.strip().split("\n")[0])
        self.report(b, st == 0, "ran in %.1f s: %s%s" % (time.monotonic() - t0, first,
                                                         " (+ %s)" % quick if quick else ""),
                    "exit status %d; output:\n%s" % (st, out))

    def check_console(self, b, w, on_path):
        env = self.env(b, on_path)
        cmds, cur = [], None
        for ln in b.body.split("\n"):
            if cur is not None:
                cur += "\n" + ln
            elif ln.startswith("$ "):
                cur = ln[2:]
            if cur is not None and not cur.endswith("\\"):
                cmds.append(cur)
                cur = None
        probs, done = self.static_problems("\n".join(cmds) + "\n", w, env, dry_run=False)
        checked = ", ".join(dict.fromkeys(done))
        self.report(b, not probs, "output not checked; %d command(s): %s" % (len(cmds), checked),
                    "\n".join(probs))

    def check_usage(self, b):
        probs = []
        for ln in b.body.strip().split("\n"):
            words = ln.split()
            if not words or words[0] != "dtrain":
                probs.append("a usage line starts with dtrain: %r" % ln)
                continue
            cmd = words[1]
            st, out, known, _ = self.help(cmd)
            if st != 0:
                probs.append("'dtrain %s' is not a command" % cmd)
                continue
            if len(words) > 2 and re.match(r"^[a-z_|]+$", words[2]):
                probs += ["dtrain %s --help does not name %s" % (cmd, alt)
                          for alt in words[2].split("|") if not re.search(r"\b%s\b" % alt, out)]
            for flag in re.findall(r"(?<![\w-])(-{1,2}[A-Za-z][\w-]*)", " ".join(words[2:])):
                if flag not in known:
                    probs.append("dtrain %s has no option %s" % (cmd, flag))
        self.report(b, not probs, "synopsis matches --help", "\n".join(probs))

    # --- YAML ----------------------------------------------------------------------------
    def check_yaml_parse_only(self, b):
        try:
            import yaml  # noqa: PLC0415 - only blocks that are not job specs need it
        except ImportError:
            return self.report(b, False, "parse-only needs PyYAML (python3-yaml)")
        try:
            yaml.safe_load(b.body)
        except yaml.YAMLError as e:
            return self.report(b, False, "parses as YAML", str(e))
        self.report(b, True, "parses as YAML (%s)" % b.directive("parse-only"))

    def spec_file(self, b, top):
        """The block as a whole job spec in a file: (path, "job spec" or "part of a job spec")."""
        text, kind = b.body, "job spec"
        if "name" not in top:
            kind = "part of a job spec"
            text = text.rstrip("\n") + "\nname: doc-%d\n" % b.line
            if "command" not in top and "trainer" not in top:
                text += 'command: ["true"]\n'
        d = os.path.join(self.scratch, "yaml")
        os.makedirs(d, exist_ok=True)
        spec = os.path.join(d, "%s-%d.yaml" % (re.sub(r"\W+", "-", b.path), b.line))
        with open(spec, "w") as f:
            f.write(text)
        return spec, kind

    def check_yaml(self, b, w):
        if b.directive("parse-only") is not None:
            return self.check_yaml_parse_only(b)
        env = self.env(b, True)
        top = re.findall(r"^([A-Za-z_]\w*)[ \t]*:", b.body, re.M)
        spec, kind = self.spec_file(b, top)

        def doc_lines(out):  # dtrain names lines of the file it read; the reader wants the doc's
            out = re.sub(re.escape(spec) + r":(\d+):",
                         lambda m: "%s:%d:" % (b.path, b.line + int(m.group(1))), out)
            return out.replace(spec, "%s (the block at line %d)" % (b.path, b.line))
        sets = [a for item in shlex.split(b.directive("set") or "") for a in ("--set", item)]
        st, out = self.run([self.dtrain, "validate", spec] + sets, w, env)
        if st != 0:
            return self.report(b, False, "dtrain validate accepts it (%s)" % kind, doc_lines(out))
        scheds = [s for s in ("slurm", "kubernetes", "mpirun") if s in top]
        m = re.search(r"^scheduler:\s*(\w+)", b.body, re.M)
        if m and m.group(1) != "local" and m.group(1) not in scheds:
            scheds.append(m.group(1))
        for s in scheds:
            st, out = self.run([self.dtrain, "render", s, spec, "--set", "scheduler=" + s, "-o",
                                spec + "." + s] + sets, w, env)
            if st != 0:
                return self.report(b, False, "dtrain render %s writes it" % s, doc_lines(out))
        m = re.match(r"^#\s*([\w.-]+\.ya?ml)\s*$", b.body.split("\n")[0])
        if m:
            with open(os.path.join(w, m.group(1)), "w") as f:
                f.write(b.body)
        self.report(b, True, "dtrain validate%s%s: ok (%s)%s" % (
            " " + " ".join(sets) if sets else "", "".join(", render " + s for s in scheds), kind,
            ", saved as " + m.group(1) if m else ""))

    # --- one block ---------------------------------------------------------------------------
    def check(self, b):
        known = ("no-run", "quick", "env", "set", "parse-only")
        bad = [k for k, _ in b.directives if k not in known]
        if bad:
            return self.report(b, False, "unknown doc-test directive %s (known: %s)"
                               % (bad, ", ".join(known)))
        if b.cls not in CLASSES:
            return self.report(b, False, "fence info string %r is none of %s: say what the block is"
                               " (tests/integration/doc_blocks.py)" % (b.info, ", ".join(CLASSES)))
        w = self.workdir(b.path)
        on_path = os.path.basename(b.path) != "README.md"
        if b.cls == "sh":
            self.check_sh(b, w, on_path)
        elif b.cls == "console":
            self.check_console(b, w, on_path)
        elif b.cls == "yaml":
            self.check_yaml(b, w)
        elif b.cls == "usage":
            self.check_usage(b)
        else:
            self.report(b, True, "not checked (text)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtrain", required=True)
    ap.add_argument("--repo", required=True, help="the checkout whose files the docs name")
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--timeout", default="120", help="seconds a block may run")
    ap.add_argument("--list", action="store_true", help="only list the blocks and their classes")
    ap.add_argument("docs", nargs="+")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    blocks, orphans = [], []
    for path in args.docs:
        rel = os.path.relpath(path, args.repo) if os.path.isabs(path) else path
        found, lost = extract(rel, open(path, encoding="utf-8").read())
        blocks += found
        orphans += ["%s:%d" % (rel, n) for n in lost]
    if args.list:
        for b in blocks:
            print("%s\t%s\t%s" % (b.where(), b.info, "; ".join("%s: %s" % d for d in b.directives)))
        return 0
    c = Checker(args)
    for where in orphans:
        c.failed += 1
        print("not ok - %s: a doc-test comment must be on the line(s) just above a fence" % where)
    for b in blocks:
        c.check(b)
    print("# doc_blocks: %d blocks: %s" % (len(blocks), ", ".join(
        "%d %s" % (n, k or "unclassified") for k, n in sorted(c.counts.items()))))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
