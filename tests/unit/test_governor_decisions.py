"""The governor's decisions (sdb_sidecar.ebpf.Governor), on made-up event counts: when it pauses the
eBPF creation probes and how long each pause lasts."""
from __future__ import annotations

import pytest

from sdb_sidecar.ebpf import BACKOFF_MAX_S, BACKOFF_MIN_S, BURST_S, QUIET_S, Governor

pytestmark = pytest.mark.once
POLL = 0.02


def test_a_rate_under_the_budget_never_pauses():
    g = Governor(5000, now=0.0)
    t = 0.0
    for _ in range(1000):                       # 20 s at 4,900 events/s
        t += POLL
        assert not g.attached(t, int(4900 * POLL))


def test_a_short_burst_within_the_allowance_passes_then_a_long_one_pauses():
    g = Governor(5000, now=0.0)
    assert not g.attached(POLL, int(5000 * BURST_S))      # one tenth of a second's worth at once
    t = POLL
    paused = False
    for _ in range(50):                                    # then 50,000 events/s
        t += POLL
        if g.attached(t, 1000):
            paused = True
            break
    assert paused and t < 0.2
    assert g.paused_until == pytest.approx(t + BACKOFF_MIN_S)
    assert not g.resume_due(t + BACKOFF_MIN_S - 0.01) and g.resume_due(t + BACKOFF_MIN_S)


def test_pauses_back_off_while_the_burst_goes_on_and_reset_when_quiet():
    g = Governor(5000, now=0.0)
    t, backoffs = 0.0, []
    for _ in range(6):                                     # each resume meets the same flood
        t += POLL
        assert g.attached(t, 10_000)
        backoffs.append(g.backoff)
        t = g.paused_until
        g.resumed(t)
    assert backoffs == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0] and BACKOFF_MAX_S == 4.0
    for _ in range(int(QUIET_S / POLL) + 1):              # quiet for QUIET_S
        t += POLL
        assert not g.attached(t, 10)
    t += POLL
    assert g.attached(t, 10_000) and g.backoff == BACKOFF_MIN_S


def test_max_rate_zero_never_pauses():
    g = Governor(0, now=0.0)
    assert not any(g.attached(POLL * (i + 1), 1_000_000) for i in range(100))
