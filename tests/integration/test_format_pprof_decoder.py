"""pprof, read by a decoder sdb did not write: the pprof-format package from npm (a pure JS
pprof encoder/decoder) decodes the file with its own schema and finds the same totals, value
types, labels, functions and locations as the trace: the committed profile.proto matches pprof's."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import REPO
from format_recording import formats_trace, symbolize

pytestmark = pytest.mark.once

PPROF_FORMAT = REPO / "build" / "speedscope" / "node_modules" / "pprof-format"
DECODE = r"""
const { Profile } = require(process.argv[1]);
const p = Profile.decode(require("zlib").gunzipSync(require("fs").readFileSync(process.argv[2])));
const st = p.stringTable.strings || p.stringTable;
const s = (i) => st[Number(i)];
const fn = new Map(p.function.map((f) => [Number(f.id), f]));
const loc = new Map(p.location.map((l) => [Number(l.id), l]));
console.log(JSON.stringify({
  sampleType: p.sampleType.map((v) => [s(v.type), s(v.unit)]),
  period: Number(p.period), periodType: [s(p.periodType.type), s(p.periodType.unit)],
  samples: p.sample.map((x) => ({
    value: x.value.map(Number),
    labels: Object.fromEntries(x.label.map((l) => [s(l.key), Number(l.str) ? s(l.str) : Number(l.num)])),
    frames: x.locationId.map((id) => {
      const line = loc.get(Number(id)).line[0], f = fn.get(Number(line.functionId));
      return [s(f.name), s(f.filename), Number(line.line)];
    }),
  })),
}));
"""


def test_an_independent_decoder_reads_the_same_profile(tmp_path_factory, tmp_path):
    if not (PPROF_FORMAT / "package.json").exists():
        pytest.fail(f"missing {PPROF_FORMAT}: run `make build/stamps/npm` (make test does)")
    path, trace = formats_trace(tmp_path_factory)
    out = tmp_path / "profile.pb.gz"
    symbolize(path, "pprof", "--idle", out=out)
    r = subprocess.run(["node", "-e", DECODE, str(PPROF_FORMAT), str(out)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    period = int(round(1e9 / trace.header["rate_hz"]))
    assert p["sampleType"] == [["samples", "count"], ["wall", "nanoseconds"], ["cpu", "nanoseconds"]]
    assert p["periodType"] == ["wall", "nanoseconds"] and p["period"] == period
    assert sum(x["value"][0] for x in p["samples"]) == len(trace.samples)
    assert all(x["value"][1] == x["value"][0] * period for x in p["samples"])
    assert all(x["value"][2] == (x["value"][1] if x["labels"]["thread_state"] == "running" else 0)
               for x in p["samples"])
    per_tid = {}
    for x in p["samples"]:
        assert set(x["labels"]) == {"thread_id", "thread_name", "thread_state", "pid"}
        assert x["labels"]["pid"] == trace.header["pid"]
        per_tid[x["labels"]["thread_id"]] = per_tid.get(x["labels"]["thread_id"], 0) + x["value"][0]
    want = {}
    for s in trace.samples:
        tid = trace.threads[s[1]]["tid"]
        want[tid] = want.get(tid, 0) + 1
    assert per_tid == want
    crunch = [x["frames"] for x in p["samples"] if x["labels"]["thread_name"] == "format_cruncher"]
    leafs = {f[0][0] for f in crunch}
    assert any("format_crunch" in n for n in leafs), leafs
    assert all(f[1].endswith("formats.rb") and f[2] > 0 for fr in crunch for f in fr if "format_crunch" in f[0])
