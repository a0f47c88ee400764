"""The in-context reads' first timer alone: a cpu-clock perf event on every CPU (they now put one on
each recorded thread instead: threadtimers.py) at the period the in-context reads use for a 1 kHz sampler (incontext.read_period_ns), running an eBPF program that returns at
once. What boot_real's `timer` configuration runs beside the plain program, to tell the interrupt's
cost from the reads' (the copy, the sampler's use of it). Prints "ready" once attached, then waits
for SIGTERM. Needs root and bcc, as the reads do."""
from __future__ import annotations

import signal
import sys

from sdb_sidecar.ebpf.bpfload import _import_bcc, check_available, compile_bpf
from sdb_sidecar.ebpf.incontext import read_period_ns
from sdb_sidecar.ebpf.threadtimers import PERF_COUNT_SW_CPU_CLOCK, PERF_TYPE_SOFTWARE

EMPTY = "struct bpf_perf_event_data;\nint on_tick(struct bpf_perf_event_data *ctx) { return 0; }\n"


def main() -> int:
    rate = float(sys.argv[1]) if len(sys.argv) > 1 else 1000.0
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    check_available()
    bpf = compile_bpf(_import_bcc(), EMPTY, [], nice=0)
    bpf.attach_perf_event(ev_type=PERF_TYPE_SOFTWARE, ev_config=PERF_COUNT_SW_CPU_CLOCK, fn_name=b"on_tick",
                          sample_period=read_period_ns(rate))
    print("ready", flush=True)
    signal.sigwait([signal.SIGTERM])
    return 0


if __name__ == "__main__":
    sys.exit(main())
