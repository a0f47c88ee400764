"""make demo: run the example shop, record it with sdb for a few seconds, print its top stacks.

Everything it makes lands in out/demo/: the raw trace and the collapsed stacks."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ruby", default="ruby")
    ap.add_argument("--gem-home", required=True)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    args = ap.parse_args()
    out = os.path.join(ROOT, "out", "demo")
    os.makedirs(out, exist_ok=True)
    trace = os.path.join(out, "trace.msgpack")
    collapsed = os.path.join(out, "profile.collapsed")
    env = dict(os.environ, GEM_HOME=args.gem_home, GEM_PATH=args.gem_home)

    app = subprocess.Popen([args.ruby, os.path.join(ROOT, "examples", "shop.rb"), str(args.seconds + 30)],
                           stdout=subprocess.PIPE, env=env, text=True)
    try:
        line = app.stdout.readline()
        if not line.startswith("ready"):
            print("demo: the example app did not start", file=sys.stderr)
            return 1
        print(f"demo: example app running as pid {app.pid}; recording {args.seconds:g} s at {args.rate:g} Hz")
        run([os.path.join(BIN, "sdb-sidecar"), "attach", "--pid", str(app.pid), "--rate", str(args.rate),
             "--duration", str(args.seconds), "-o", trace])
    finally:
        app.terminate()
        app.wait()
    run([os.path.join(BIN, "sdb-symbolize"), trace, "--format", "collapsed", "-o", collapsed])
    print_top(collapsed)
    print(f"\ndemo: files in {os.path.relpath(out, ROOT)}/: trace.msgpack (raw trace), profile.collapsed "
          f"(flamegraph.pl / speedscope input)")
    return 0


def run(cmd):
    r = subprocess.run(cmd)
    if r.returncode != 0:
        sys.exit(f"demo: {os.path.basename(cmd[0])} failed with exit code {r.returncode}")


def print_top(collapsed: str, n: int = 12) -> None:
    stacks = Counter()
    leaf = Counter()
    total = 0
    with open(collapsed) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")
            c = int(count)
            total += c
            thread = frames[0]
            names = [fr.rsplit(" (", 1)[0] for fr in frames[1:]]
            stacks[(thread, tuple(names))] += c
            leaf[names[-1] if names else "(no Ruby frames)"] += c
    print(f"\nTop stacks ({total} samples, leaf last):")
    for (thread, names), c in stacks.most_common(n):
        shown = [x for x in names if x not in ("block in wrap",)]
        print(f"  {100.0 * c / total:5.1f}%  [{thread.split(' (')[0].replace('thread ', '')}] "
              + " > ".join(shown[-5:]))
    print(f"\nTop functions by own samples:")
    for name, c in leaf.most_common(n):
        print(f"  {100.0 * c / total:5.1f}%  {name}")


if __name__ == "__main__":
    sys.exit(main())
