"""The governor's decisions (sdb_sidecar.ebpf.governor.Governor), on made-up event counts: when it pauses the
eBPF creation probes and how long each pause lasts."""
from __future__ import annotations

import pytest

from sdb_sidecar.ebpf.governor import BACKOFF_MAX_S, BACKOFF_MIN_S, BURST_S, QUIET_S, Governor

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


def test_the_probes_stop_themselves_at_the_record_that_spends_the_budget_with_the_refill_to_the_next_poll():
    g = Governor(5000, now=0.0)
    # a full bucket (500) plus what flows in until the next poll (5,000/s x 20 ms): the 601st record
    assert g.wake_at(sent=1000, poll_s=POLL) == 1000 + 500 + 100 + 1
    assert not g.attached(POLL, 300)                                   # 500 (full again) - 300 left
    assert g.wake_at(sent=1300, poll_s=POLL) == 1300 + 200 + 100 + 1
    assert Governor(0, now=0.0).wake_at(sent=5, poll_s=POLL) == 0      # never paused: never stops


def test_a_budget_the_probes_found_spent_pauses_even_if_the_refill_would_cover_it():
    g = Governor(5000, now=0.0)
    assert not g.attached(1.0, 450)                  # within the bucket after a second's refill
    g = Governor(5000, now=0.0)
    assert g.attached(1.0, 450, spent=True)          # but the probes already stopped: a pause
    assert g.paused_until == pytest.approx(1.0 + BACKOFF_MIN_S)
