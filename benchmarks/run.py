"""Run the sdb recording benchmarks; write benchmarks/results/<name>.json and print Markdown tables.

  benchmarks/run.py --ruby /usr/bin/ruby --gem-home build/gem-home            # all, full (~30 min)
  benchmarks/run.py ... --quick                                                   # smoke (~2 min)
  benchmarks/run.py ... --only sample_cost|sidecar_cpu|busy_pace|cpu_micro|rails_overhead [--rounds N]
  benchmarks/run.py ... --only rails_overhead --only cpu_micro                    # issue #5 (~20 min)
  benchmarks/run.py ... --only boot_symbolizer                                    # issue #4 eBPF boot (~5 min)
  benchmarks/run.py ... --only ebpf_pause_cost                                    # issue #4 what a pause costs (~30 s)
  benchmarks/run.py ... --only first_sample                                       # issue #13 time to first sample (~3 min)
  benchmarks/run.py ... --only child_first_sample                                 # issue #13 a process tree's new child, quiet and busy (~1 min)
  benchmarks/run.py ... --only boot_real                                          # issue #13 rubocop's boot under record, five configurations (~11 min)
  benchmarks/run.py ... --only gc_alloc                                           # issue #17 allocation with the gem, 3.1 GC (~3 min)
  benchmarks/run.py ... --only fork_cost                                          # issue #18 fork + exit! with the gem (~3 min)
  benchmarks/run.py ... --only always_on                                          # issue #18 30 min left on: RSS, bytes a sample
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import always_on  # noqa: E402
import boot_real  # noqa: E402
import boot_symbolizer  # noqa: E402
import busy_pace  # noqa: E402
import child_first_sample  # noqa: E402
import common  # noqa: E402
import cpu_micro  # noqa: E402
import ebpf_pause_cost  # noqa: E402
import first_sample  # noqa: E402
import fork_cost  # noqa: E402
import gc_alloc  # noqa: E402
import rails_overhead  # noqa: E402
import sample_cost  # noqa: E402
import sidecar_cpu  # noqa: E402
import span_cost  # noqa: E402
import symbolize_formats  # noqa: E402

BENCHMARKS = {m.NAME: m for m in (sample_cost, sidecar_cpu, busy_pace, cpu_micro, rails_overhead,
                                   symbolize_formats, boot_symbolizer, ebpf_pause_cost, first_sample, boot_real,
                                   child_first_sample,
                                   gc_alloc, fork_cost, span_cost, always_on)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ruby", default="/usr/bin/ruby")
    ap.add_argument("--gem-home", default="", help="GEM_HOME with the sdb gem installed (make setup); "
                    "default: the gem installed in that Ruby (scripts/rubies)")
    ap.add_argument("--quick", action="store_true", help="short smoke run (~2 min for all), 1 round each")
    ap.add_argument("--only", choices=sorted(BENCHMARKS), action="append", help="run only this one (repeatable)")
    ap.add_argument("--rounds", type=int, default=0, help="rounds per configuration (default: per benchmark)")
    ap.add_argument("--results", default=common.RESULTS, help="where the JSON results go (default benchmarks/results)")
    ap.add_argument("--profiles", default=os.path.join(common.ROOT, "out", "bench"),
                    help="where the profiles recorded by rails_overhead go (default out/bench)")
    cfg = ap.parse_args()
    cfg.gem_home = os.path.abspath(cfg.gem_home) if cfg.gem_home else ""
    names = cfg.only or list(BENCHMARKS)
    m = common.machine(cfg)
    print(f"# sdb benchmarks{' (quick)' if cfg.quick else ''}\n\n"
          f"{m['cpu']}, {m['cores']} cores, kernel {m['kernel']}, {m['ruby']}, {m['date']}; "
          f"commit {common.git_commit()}; {m['pinning']}\n", flush=True)
    out = []
    for name in names:
        t0 = time.monotonic()
        print(f"## {name}", file=sys.stderr, flush=True)
        try:
            md = BENCHMARKS[name].run(cfg)
        except RuntimeError as e:  # a target, the app or a tool failed: say which, keep what ran
            print(f"benchmarks: {name}: {e}", file=sys.stderr)
            return 1
        out.append(md)
        print(f"  ({name}: {time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    print("\n".join(out))
    print(f"results: {os.path.relpath(cfg.results)}/" + ", ".join(f"{n}{'-quick' if cfg.quick else ''}.json" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
