"""The push side's parts without a recording: the Pyroscope messages as an independent decoder (the
protobuf library, from the receiver's descriptor of push.proto) reads them, the queue's bound and
its exact drop count, Retry-After, and the credentials taken from a file or the environment only."""
from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import pytest

from sdb_sidecar.errors import Exit, SdbError
from sdb_sidecar.push import pyroscope
from sdb_sidecar.commands.common import add_push_arguments
from sdb_sidecar.push.config import auth_headers, push_config
from sdb_sidecar.push.queue import Payload, PayloadQueue
from sdb_sidecar.push.transport import retry_after

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from push_receiver import PushRequest  # noqa: E402


def test_push_request_reads_back_with_an_independent_decoder():
    body = pyroscope.push_request([
        pyroscope.raw_profile_series([("service_name", "shop é"), ("__name__", "wall")], [b"\x1f\x8bpprof", b"two"]),
        pyroscope.raw_profile_series([("service_name", "shop é"), ("__name__", "process_cpu")], [b"x" * 300]),
    ])
    req = PushRequest()
    req.ParseFromString(body)
    assert [[(lp.name, lp.value) for lp in s.labels] for s in req.series] == [
        [("service_name", "shop é"), ("__name__", "wall")], [("service_name", "shop é"), ("__name__", "process_cpu")]]
    assert [[x.raw_profile for x in s.samples] for s in req.series] == [[b"\x1f\x8bpprof", b"two"], [b"x" * 300]]
    assert all(len(x.ID) == 36 for s in req.series for x in s.samples)


def test_the_queue_drops_the_oldest_beyond_its_bytes_and_counts_each():
    q = PayloadQueue(max_bytes=100)
    for i in range(5):
        q.put(Payload(f"/{i}", b"x" * 40))
    assert q.dropped == 3 and q.bytes == 80
    assert [q.get(0).path, q.get(0).path, q.get(0)] == ["/3", "/4", None]
    q.put(Payload("/big", b"x" * 101))
    assert q.dropped == 4 and len(q) == 0


def test_a_profile_over_pyroscope_s_sample_limit_is_split_not_cut():
    from sdb_symbolize.pprof import Profile
    from sdb_symbolize.protowire import message, packed_varints, string, uint
    from sdb_symbolize.reporters.pprof import Encoded
    n = pyroscope.MAX_SAMPLES * 2 + 5
    p = Encoded(message(1, uint(1, 1) + uint(2, 2), keep=True),
                [message(2, packed_varints(2, [i + 1]), keep=True) for i in range(n)],
                b"".join(string(6, t, keep=True) for t in ("", "samples", "count")) + uint(9, 123))
    parts = [Profile.FromString(x) for x in pyroscope.split(p)]
    assert len(parts) >= 3 and all(len(x.sample) <= pyroscope.MAX_SAMPLES for x in parts)
    # each part a whole profile: its own sample types, string table and time
    assert all(list(x.string_table) == ["", "samples", "count"] and x.time_nanos == 123
               and [(t.type, t.unit) for t in x.sample_type] == [(1, 2)] for x in parts)
    assert sum(v for x in parts for s in x.sample for v in s.value) == sum(range(1, n + 1))


def test_retry_after_seconds_or_date():
    assert retry_after("7") == 7.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert retry_after("soon") is None and retry_after(None) is None


def parse(argv):
    p = argparse.ArgumentParser()
    add_push_arguments(p)
    return push_config(p.parse_args(argv))


def test_credentials_come_from_the_environment_or_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SDB_PUSH_TOKEN", "s3cret")
    c = parse(["--push", "pyroscope=http://h:4040", "--push-tenant", "team-a"])
    assert c.headers == {"Authorization": "Bearer s3cret", "X-Scope-OrgID": "team-a"}
    f = tmp_path / "auth"
    f.write_text("# pyroscope\nSDB_PUSH_BASIC_AUTH=u:p w\n")
    c = parse(["--push", "pyroscope=https://h/", "--push-auth-file", str(f)])
    assert c.headers == {"Authorization": "Basic dTpwIHc="}     # the file, not the environment
    assert c.destinations[0].url == "https://h"
    f.write_text("password=x\n")
    with pytest.raises(SdbError) as e:
        parse(["--push", "pyroscope=http://h", "--push-auth-file", str(f)])
    assert e.value.code == Exit.USAGE and "line 1" in str(e.value)
    with pytest.raises(SdbError):
        auth_headers({"SDB_PUSH_TOKEN": "a\r\nX-Evil: 1"}, None)


@pytest.mark.parametrize("status,verdict", [(200, "sent"), (204, "sent"), (401, "drop"), (403, "drop"),
                                            (404, "drop"), (413, "drop"), (429, "retry"), (500, "retry"),
                                            (502, "retry"), (503, "retry"), (400, "drop")])
def test_each_answer_is_retried_only_where_a_later_try_can_succeed(status, verdict):
    from sdb_sidecar.push.transport import Transport
    out = Transport._answer(status, "Reason", "3" if status == 429 else None, b"why\nmore", "http://h/x")
    assert out.verdict == verdict
    if verdict != "sent":
        assert f"HTTP {status}" in out.message and "\n" not in out.message
    if status == 429:
        assert out.retry_after_s == 3.0
