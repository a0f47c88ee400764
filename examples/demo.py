"""make demo: boot the Rails benchmark app, load it with wrk, record it with sdb for a few seconds,
print its top stacks; then the same app in puma's cluster mode (a master and 2 workers), recorded by
attaching to the master alone: every worker is recorded too, each process on its own.

  examples/demo.py --gem-home build/gem-home                 # the Rails app (benchmarks/rails_app)
  examples/demo.py --gem-home build/gem-home --app shop      # examples/shop.rb, plain Ruby threads

Everything it makes lands in out/demo/: the raw traces, the collapsed stacks and the cluster's summary."""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
RAILS_APP = os.path.join(ROOT, "benchmarks", "rails_app")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ruby", default="ruby")
    ap.add_argument("--gem-home", required=True)
    ap.add_argument("--app", choices=("rails", "shop"), default="rails")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--no-cluster", dest="cluster", action="store_false", help="skip the cluster-mode part")
    args = ap.parse_args()
    out = os.path.join(ROOT, "out", "demo")
    os.makedirs(out, exist_ok=True)
    trace = os.path.join(out, "trace.msgpack")
    collapsed = os.path.join(out, "profile.collapsed")
    # the gem from the project's GEM_HOME, Debian's gems (Rails, puma) after it (the trailing ':')
    gem_home = os.path.abspath(args.gem_home)  # the Rails app runs in its own directory
    env = dict(os.environ, GEM_HOME=gem_home, GEM_PATH=gem_home + ":")
    start = start_rails if args.app == "rails" else start_shop
    app, load = start(args, env, out)
    record(args, app, load, trace,
           f"demo: {args.app} app running as pid {app.pid}; recording {args.seconds:g} s at {args.rate:g} Hz")
    run([os.path.join(BIN, "sdb-symbolize"), trace, "--format", "collapsed", "-o", collapsed])
    # the top lists count cpu (the samples of running threads): wall's would mix in the threads
    # waiting for the GVL, time spent where another thread ran
    cpu = os.path.join(out, "profile-cpu.collapsed")
    run([os.path.join(BIN, "sdb-symbolize"), trace, "--format", "collapsed", "--sample-type", "cpu", "-o", cpu])
    print_top(cpu, strip_paths=(RAILS_APP + "/",))
    print(f"\ndemo: files in {os.path.relpath(out, ROOT)}/: trace.msgpack (raw trace), profile.collapsed "
          f"(wall: every thread but blocked ones) and profile-cpu.collapsed (cpu: running threads): flamegraph.pl / "
          f"speedscope input")
    if args.app == "rails" and args.cluster:
        cluster(args, env, out)
    return 0


def cluster(args, env, out) -> None:
    """puma in cluster mode (2 workers forked from a master that loaded the app and the gem), recorded
    by attaching to the master: its workers are followed; the summary has a table per process."""
    trace = os.path.join(out, "cluster.msgpack")
    summary = os.path.join(out, "cluster.summary.txt")
    app, load = start_rails(args, dict(env, APP_WORKERS="2"), out)
    record(args, app, load, trace, f"\ndemo: the same app in cluster mode: master pid {app.pid} and 2 workers; "
                                   f"recording the master {args.seconds:g} s (its workers are followed)")
    run([os.path.join(BIN, "sdb-symbolize"), trace, "--format", "summary", "--no-lines", "-o", summary])
    print("\nPer process (the 3 functions with the most own samples of each):")
    with open(summary) as f:
        shown = 0
        for line in f:
            if line.startswith("process "):
                print("  " + line.rstrip())
                shown = 0
            elif shown < 3 and line[:10].strip().isdigit():
                print("      " + line.rstrip().replace(RAILS_APP + "/", ""))
                shown += 1
    print(f"demo: files in {os.path.relpath(out, ROOT)}/: cluster.msgpack (one trace, 3 processes), "
          f"cluster.summary.txt")


def record(args, app, load, trace: str, say: str) -> None:
    """`sdb-sidecar attach` to the app for args.seconds, then the app and its load stopped."""
    try:
        print(say)
        run([os.path.join(BIN, "sdb-sidecar"), "attach", "--pid", str(app.pid), "--rate", str(args.rate),
             "--duration", str(args.seconds), "-o", trace])
    finally:
        for p in (load, app):
            if p is not None and p.poll() is None:
                p.terminate()
            if p is not None:
                p.wait()


def start_rails(args, env, out):
    """puma + Rails (APP_PROFILER=sdb: config/boot.rb does `require "sdb"`), a fresh SQLite file,
    then wrk cycling through its endpoints for the whole recording."""
    if shutil.which("wrk") is None:
        sys.exit("demo: wrk is missing (scripts/setup-machine installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = os.path.join(out, "app.sqlite3")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.unlink(db + suffix)
    log = open(os.path.join(out, "rails.log"), "w")
    app = subprocess.Popen([args.ruby, "-S", "puma", "-C", os.path.join(RAILS_APP, "config", "puma.rb")],
                           env=dict(env, APP_PROFILER="sdb", APP_DB=db, PORT=str(port)), cwd=RAILS_APP,
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/up", timeout=2):
                break
        except OSError:
            if app.poll() is not None or time.monotonic() > deadline:
                app.kill()
                app.wait()
                sys.exit(f"demo: the Rails app did not start (see {os.path.relpath(log.name, ROOT)})")
            time.sleep(0.1)
    load = subprocess.Popen(["wrk", "-t1", "-c5", f"-d{args.seconds + 30:g}s", "-s",
                             os.path.join(RAILS_APP, "wrk", "mix.lua"), f"http://127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"demo: Rails app (benchmarks/rails_app) on port {port}, loaded by wrk (5 connections)")
    time.sleep(1.0)  # the first requests load what they need
    return app, load


def start_shop(args, env, out):
    app = subprocess.Popen([args.ruby, os.path.join(ROOT, "examples", "shop.rb"), str(args.seconds + 30)],
                           stdout=subprocess.PIPE, env=env, text=True)
    line = app.stdout.readline()
    if not line.startswith("ready"):
        app.kill()
        app.wait()
        sys.exit("demo: the example app did not start")
    return app, None


def run(cmd):
    r = subprocess.run(cmd)
    if r.returncode != 0:
        sys.exit(f"demo: {os.path.basename(cmd[0])} failed with exit code {r.returncode}")


def print_top(collapsed: str, n: int = 12, strip_paths=()) -> None:
    stacks = Counter()
    leaf = Counter()
    app_code = Counter()  # inclusive: samples with this method of the app's own code on the stack
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
            mine = set()
            for fr in frames[1:]:
                name, _, where = fr.rpartition(" (")
                for prefix in strip_paths:
                    if where.startswith(prefix) and not name.startswith("block "):
                        mine.add(f"{name} ({where[len(prefix):].rsplit(':', 1)[0]})")
            for m in mine:
                app_code[m] += c
    if not total:
        print("\nNo cpu samples (samples of running threads) were recorded.")
        return
    print(f"\nTop stacks ({total} cpu samples: threads running, not waiting for the GVL; leaf last):")
    for (thread, names), c in stacks.most_common(n):
        shown = [x for x in names if x not in ("block in wrap",)]
        print(f"  {100.0 * c / total:5.1f}%  [{thread.split(' (')[0].replace('thread ', '')}] "
              + " > ".join(shown[-5:]))
    print("\nTop functions by own samples:")
    for name, c in leaf.most_common(n):
        print(f"  {100.0 * c / total:5.1f}%  {name}")
    if app_code:
        print("\nThe app's own code, by samples with it on the stack:")
        for name, c in app_code.most_common(n):
            print(f"  {100.0 * c / total:5.1f}%  {name}")


if __name__ == "__main__":
    sys.exit(main())
