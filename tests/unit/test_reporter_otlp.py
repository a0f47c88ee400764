"""OTLP profiles (`-f otlp`): one ExportProfilesServiceRequest, hand-encoded, read back with the
official generated classes of opentelemetry-proto 1.45.2 (tests/otlp_decode.py). On a trace written
by hand (two processes, requests, a job, hostile names, an unnamed frame, every thread state), on
a real recording of tests/programs/formats.rb, and on the trace corpora: every sample there with its
time, the totals of each sample type those of the pprof output, the frames named as collapsed and
pprof name them, the attributes right, and the dictionary's index-0 rules kept."""
from __future__ import annotations

import gzip
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from format_recording import formats_trace, symbolize
from otlp_decode import check_dictionary, decode, resource_attributes, samples
from sdb_symbolize.options import ProfileOptions
from sdb_symbolize.pprof import Profile
from sdb_symbolize.profile import render, render_bytes
from sdb_symbolize.reporters.collapsed import _clean
from sdb_trace import KIND_CFUNC, KIND_RUBY, STATE_BLOCKED, STATE_GVL_WAIT, STATE_RUNNING, TraceFile, TraceWriter

pytestmark = pytest.mark.once

START = 7_000_000_000
WALL = 1_750_000_000_000_000_000
MS = 1_000_000
EVIL = "w\x1b[31m;\n\u202e"                 # a thread name the app chose: data, never escaped in OTLP
HEADER = {"pid": 500, "ruby": "3.4.5", "ruby_description": "ruby 3.4.5 (2025-07-16) [x86_64-linux]", "layout": "3.4",
          "rate_hz": 1000, "start_mono_ns": START, "start_wall_ns": WALL, "hostname": "web-1",
          "sdb_version": "0.1.0", "command": ["puma", "5.6.7", "(tcp://0.0.0.0:3000)", "[shop]"], "max_depth": 2048}
STATES = (STATE_RUNNING, STATE_GVL_WAIT, STATE_BLOCKED, 0)
STATE_WORDS = {STATE_RUNNING: "running", STATE_GVL_WAIT: "waiting for GVL", STATE_BLOCKED: "blocked", 0: "unknown"}
CORPUS = Path(__file__).resolve().parent / "format3_corpus"
FUZZ_CORPUS = Path(__file__).resolve().parent / "trace_corpus"


def write_recording(path: Path) -> list:
    """Two processes; the samples written, as (pid, tid, state, t_ns) each."""
    written = []
    with open(path, "wb") as f:
        w = TraceWriter(f, HEADER)
        w.process(0, pid=500, ppid=1, parent=-1, command=HEADER["command"], at_ns=START)
        main, child = w.for_process(0), w.for_process(1)
        main.thread(1, 500, "", START, 1, START)
        main.thread(2, 501, EVIL, START, 0, START)
        main.iseq(0x1000, "<main>", "<main>", "/app/config.ru", None, 1, 0, START)
        main.iseq(0x2000, "index", "index", "/app/products_controller.rb", None, 4, 1, START)
        main.method(0x3000, "index", 0, "ProductsController", False, START)
        main.method(0x4000, "sleep", 1, "Kernel", False, START)
        # frame 3: a Ruby frame at 0x9000, an address no symbol names: `(unknown ISeq 0x9000)`
        main.frames(0, [KIND_RUBY, KIND_RUBY, KIND_CFUNC, KIND_RUBY], [0x1000, 0x2000, 0, 0x9000],
                    [0x1010, 0x2010, 0, 0x9010], [0, 0x3000, 0x4000, 0], [2, 6, 0, 0])
        main.stacks(0, [[0], [1, 0], [2, 1, 0], [3, 0]])
        main.spans([1, 2, 1, 2], [1, 1, 2, 2], [0, 0, 0, 0], [1, 1, 2, 2],
                   [START + 5 * MS, START + 25 * MS, START + 10 * MS, START + 20 * MS], [1, 1, 2, 2],
                   [None, "ProductsController#index", "HardJob", "HardJob"], [0, 200, 0, 0], [None, "r-1", None, "j-1"])
        n = 40
        dts = [i * MS for i in range(n)]
        st1 = [STATES[i % 4] for i in range(n)]
        main.samples(START, dts, [1] * n, [i % 4 for i in range(n)], st1,
                     span=[1 if 5 <= i < 25 else 0 for i in range(n)])
        st2 = [STATES[(i // 3) % 4] for i in range(n)]
        main.samples(START, [d + 7 for d in dts], [2] * n, [(i + 1) % 3 for i in range(n)], st2,
                     span=[2 if 10 <= i < 20 else 0 for i in range(n)])
        written += [(500, 500, s, START + d) for d, s in zip(dts, st1)]
        written += [(500, 501, s, START + d + 7) for d, s in zip(dts, st2)]
        w.process(1, pid=502, ppid=500, parent=0, command=["puma: cluster worker 0: 500 [shop]"], at_ns=START + MS,
                  ruby="3.3.8", ruby_description="ruby 3.3.8")
        child.thread(1, 502, "", START, 1, START)
        child.iseq(0x1000, "serve", "serve", "/app/server.rb", None, 10, 1, START)
        child.frames(0, [KIND_RUBY], [0x1000], [0x1020], [0], [12])
        child.stacks(0, [[0]])
        child.samples(START, [i * MS + 3 for i in range(30)], [1] * 30, [0] * 30, [STATE_RUNNING] * 30)
        written += [(502, 502, STATE_RUNNING, START + i * MS + 3) for i in range(30)]
        w.process_end(1, at_ns=START + 40 * MS, reason="exited", samples=30)
        w.end(at_ns=START + 50 * MS, reason="duration", ticks=50, late=0, missed=0, samples=110, torn=0,
              retried=0, errors=0, threads=3, symbol_errors=0)
    return written


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    path = tmp_path_factory.mktemp("otlp") / "trace.msgpack"
    written = write_recording(path)
    return path, written


def otlp(path, **options):
    return decode(render_bytes(TraceFile(str(path)), ProfileOptions(format="otlp", **options)))


def pprof(path, **options) -> Profile:
    p = Profile()
    p.ParseFromString(gzip.decompress(render_bytes(TraceFile(str(path)), ProfileOptions(format="pprof", **options))))
    return p


def pprof_samples(p: Profile):
    """(labels, leaf-first function names, [samples, wall ns]) of each pprof sample."""
    st = p.string_table
    funcs = {f.id: st[f.name] for f in p.function}
    locs = {loc.id: funcs[loc.line[0].function_id] for loc in p.location}
    for s in p.sample:
        labels = {st[lb.key]: (st[lb.str] if lb.str else lb.num) for lb in s.label}
        yield labels, tuple(locs[i] for i in s.location_id), list(s.value)


def totals(req) -> Counter:
    """Sum of values per sample type."""
    out = Counter()
    for s in samples(req):
        out[s.type] += sum(s.values)
    return out


def pprof_totals(p: Profile, period: int) -> Counter:
    """What each OTLP type must total: wall every sample's ns; cpu those of running threads."""
    out = Counter()
    for labels, _, values in pprof_samples(p):
        out["wall"] += values[1]
        if labels["thread_state"] == "running":
            out["cpu"] += values[0] * period
    return out


def collapsed_frames(path, roots: int, **options) -> Counter:
    """The stacks of the collapsed output without their thread (and process) roots."""
    data = render_bytes(TraceFile(str(path)), ProfileOptions(format="collapsed", **options)).decode()
    out = Counter()
    for line in data.splitlines():
        stack, n = line.rsplit(" ", 1)
        out[tuple(stack.split(";")[roots:])] += int(n)
    return out


def otlp_frames(req, typ="wall") -> Counter:
    out = Counter()
    for s in samples(req):
        if s.type == typ:
            out[tuple(_clean(f) for f in s.frames)] += len(s.timestamps)
    return out


# ------------------------------------------------------------------ a trace written by hand
def test_the_request_decodes_with_the_official_classes_and_keeps_the_dictionary_rules(hand):
    path, _ = hand
    for options in ({}, {"idle": True}, {"idle": True, "states": True, "by": "endpoint"}, {"lines": False}):
        check_dictionary(otlp(path, **options))


def test_the_decoder_is_the_pinned_opentelemetry_proto():
    from opentelemetry.proto.version import __version__
    assert __version__ == "1.45.2"


def test_one_resource_per_process_with_its_attributes(hand):
    path, _ = hand
    req = otlp(path, idle=True)
    got = [resource_attributes(rp) for rp in req.resource_profiles]
    title = " ".join(HEADER["command"])
    assert got == [
        {"service.name": title, "host.name": "web-1", "process.pid": 500, "process.parent_pid": 1,
         "process.runtime.name": "ruby", "process.runtime.version": "3.4.5",
         "process.runtime.description": HEADER["ruby_description"]},
        {"service.name": title, "host.name": "web-1", "process.pid": 502, "process.parent_pid": 500,
         "process.runtime.name": "ruby", "process.runtime.version": "3.3.8", "process.runtime.description": "ruby 3.3.8"}]
    for rp in req.resource_profiles:
        (sp,) = rp.scope_profiles
        assert (sp.scope.name, sp.scope.version) == ("sdb", "0.1.0")
        st = req.dictionary.string_table
        assert [(st[p.sample_type.type_strindex], st[p.sample_type.unit_strindex]) for p in sp.profiles] == [
            ("wall", "nanoseconds"), ("cpu", "nanoseconds")]
        for p in sp.profiles:
            assert (st[p.period_type.type_strindex], st[p.period_type.unit_strindex], p.period) == (
                "wall", "nanoseconds", MS)
            assert (p.time_unix_nano, p.duration_nano) == (WALL, 50 * MS)
    # a pid filter keeps its process only; --service names every resource
    req = otlp(path, pids=(502,), service="shop")
    assert [resource_attributes(rp)["process.pid"] for rp in req.resource_profiles] == [502]
    assert resource_attributes(req.resource_profiles[0])["service.name"] == "shop"


def test_every_sample_is_there_at_its_time_with_its_thread_and_state(hand):
    path, written = hand
    wall = [s for s in samples(otlp(path, idle=True)) if s.type == "wall"]
    got = Counter()
    for s in wall:
        assert s.values == [MS] * len(s.timestamps)
        for t in s.timestamps:
            got[(s.pid, s.attributes["thread.id"], s.attributes["sdb.thread.state"], t)] += 1
    assert got == Counter((pid, tid, STATE_WORDS[st], t - START + WALL) for pid, tid, st, t in written)
    # without --idle, the blocked samples are left out, as in every format
    kept = sum(len(s.timestamps) for s in samples(otlp(path)) if s.type == "wall")
    assert kept == sum(1 for w in written if w[2] != STATE_BLOCKED)


def test_cpu_is_the_samples_of_running_threads_and_totals_equal_pprofs(hand):
    path, written = hand
    for options in ({"idle": True}, {}, {"idle": True, "pids": (500,)}, {"idle": True, "threads": (EVIL,)}):
        req = otlp(path, **options)
        assert totals(req) == pprof_totals(pprof(path, **options), MS), options
        for s in samples(req):
            if s.type == "cpu":
                assert s.attributes["sdb.thread.state"] == "running"
    cpu = sum(len(s.timestamps) for s in samples(otlp(path)) if s.type == "cpu")
    assert cpu == sum(1 for w in written if w[2] == STATE_RUNNING)


def test_frames_are_named_as_collapsed_and_pprof_name_them_leaf_first(hand):
    path, _ = hand
    for options in ({"idle": True}, {"idle": True, "lines": False}, {"idle": True, "labels": "ruby-profile-frames"}):
        req = otlp(path, **options)
        assert otlp_frames(req) == collapsed_frames(path, 2, **options), options
        want = Counter()
        for labels, names, values in pprof_samples(pprof(path, **options)):
            want[(labels["pid"], names)] += values[0]
        got = Counter()
        for s in samples(req):
            if s.type == "wall":
                got[(s.pid, tuple(reversed(s.labels)))] += len(s.timestamps)     # pprof's are leaf first too
        assert got == want
    names = {f for s in samples(otlp(path, idle=True)) for f in s.frames}
    assert "ProductsController#index (/app/products_controller.rb:6)" in names
    assert "Kernel#sleep (/app/products_controller.rb:6)" in names      # a C method at its Ruby caller


def test_the_attributes_name_thread_state_and_endpoint(hand):
    path, _ = hand
    req = otlp(path, idle=True)
    per = Counter()
    for s in samples(req):
        if s.type != "wall":
            continue
        a = s.attributes
        assert set(a) <= {"thread.id", "thread.name", "sdb.thread.state", "sdb.endpoint", "sdb.job"}
        assert a["thread.name"] == {500: "main", 501: EVIL, 502: "main"}[a["thread.id"]]
        per[(a["thread.id"], a.get("sdb.endpoint"), a.get("sdb.job"))] += len(s.timestamps)
    assert per == Counter({(500, "ProductsController#index", None): 20, (500, None, None): 20,
                           (501, None, "HardJob"): 10, (501, None, None): 30, (502, None, None): 30})
    # the same units of work as pprof's labels
    want = Counter()
    for labels, _, values in pprof_samples(pprof(path, idle=True)):
        want[(labels["thread_id"], labels.get("endpoint"), labels.get("job"))] += values[0]
    assert per == want


def test_strings_from_the_target_are_data_as_they_were_written(hand):
    path, _ = hand
    data = render_bytes(TraceFile(str(path)), ProfileOptions(format="otlp", idle=True))
    assert EVIL.encode() in data            # its bytes as the app set them: no escape in a binary format
    names = {s.attributes.get("thread.name") for s in samples(decode(data))}
    assert EVIL in names


def test_unnamed_frames_stay_unnamed_and_each_profile_counts_them(hand):
    path, _ = hand
    result = render(TraceFile(str(path)), ProfileOptions(format="otlp", idle=True), _Sink())
    req = otlp(path, idle=True)
    d = req.dictionary
    st = d.string_table
    counted = Counter()
    for rp in req.resource_profiles:
        for p in rp.scope_profiles[0].profiles:
            (a,) = [d.attribute_table[i] for i in p.attribute_indices]
            assert st[a.key_strindex] == "sdb.samples.unnamed"
            counted[st[p.sample_type.type_strindex]] += a.value.int_value
    unnamed = [s for s in samples(req) if any(f.startswith("(unknown ISeq 0x9000)") for f in s.frames)]
    assert counted["wall"] == sum(len(s.timestamps) for s in unnamed if s.type == "wall") == result.samples_unnamed
    assert counted["cpu"] == sum(len(s.timestamps) for s in unnamed if s.type == "cpu")
    assert counted["wall"] == 10 and counted["cpu"] == 0       # thread 1's unnamed frame: its state unknown


def test_frames_read_from_ruby_say_so_and_frames_sdb_adds_do_not(hand):
    path, _ = hand
    req = otlp(path, idle=True, states=True, by="endpoint")
    d = req.dictionary
    st = d.string_table
    ruby = [i for i, a in enumerate(d.attribute_table)
            if st[a.key_strindex] == "profile.frame.type" and a.value.string_value == "ruby"]
    assert len(ruby) == 1
    (mapping,) = [i for i, m in enumerate(d.mapping_table) if list(m.attribute_indices) == ruby]
    for loc in list(d.location_table)[1:]:
        name = st[d.function_table[loc.lines[0].function_index].name_strindex]
        made_up = name.startswith("[") or name in ("(running)", "(waiting for GVL)", "(blocked)", "(unknown)",
                                                   "(no request or job)")
        assert (list(loc.attribute_indices), loc.mapping_index) == (([], 0) if made_up else (ruby, mapping)), name
    assert {"(running)", "(blocked)"} <= {s.frames[1] for s in samples(req)}      # under the unit of work
    assert any(s.frames[0] == "[ProductsController#index]" for s in samples(req))


def test_the_command_writes_what_the_library_renders(hand, tmp_path):
    path, _ = hand
    out = tmp_path / "out.pb"
    r = subprocess.run([sys.executable, "-m", "sdb_symbolize.cli", "-f", "otlp", str(path), "-o", str(out),
                        "--idle", "--service", "shop"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == render_bytes(TraceFile(str(path)), ProfileOptions(format="otlp", idle=True,
                                                                                service="shop"))
    assert b"unknown ISeq" in r.stderr          # the note every format gives about unnamed frames


class _Sink:
    def write(self, data):
        return len(data)

    def flush(self):
        pass


# ------------------------------------------------------------------ a real recording
@pytest.fixture(scope="module")
def real(tmp_path_factory):
    return formats_trace(tmp_path_factory)


def test_a_real_recording_holds_every_sample_at_its_time(real):
    path, trace = real
    req = decode(symbolize(path, "otlp", "--idle").stdout)
    check_dictionary(req)
    h = trace.header
    period = int(round(1e9 / h["rate_hz"]))
    threads = {serial: th for serial, th in trace.threads.items()}
    want = Counter((threads[s[1]]["tid"], STATE_WORDS.get(s[3], "unknown"), s[0] - h["start_mono_ns"] + h["start_wall_ns"])
                   for s in trace.samples)
    got = Counter()
    for s in samples(req):
        if s.type == "wall":
            assert s.values == [period] * len(s.timestamps)
            for t in s.timestamps:
                got[(s.attributes["thread.id"], s.attributes["sdb.thread.state"], t)] += 1
    assert got == want
    (rp,) = req.resource_profiles
    attrs = resource_attributes(rp)
    assert (attrs["process.pid"], attrs["host.name"], attrs["process.runtime.version"]) == (
        h["pid"], h["hostname"], h["ruby"])
    assert attrs["service.name"] == " ".join(h["command"])[:80] or attrs["service.name"].endswith("...")


def test_a_real_recording_totals_and_names_equal_pprof_and_collapsed(real):
    path, trace = real
    period = int(round(1e9 / trace.header["rate_hz"]))
    for args in (["--idle"], [], ["--idle", "--no-lines"]):
        req = decode(symbolize(path, "otlp", *args).stdout)
        p = Profile()
        p.ParseFromString(gzip.decompress(symbolize(path, "pprof", *args).stdout))
        assert totals(req) == pprof_totals(p, period) and totals(req)["cpu"] > 0
        collapsed = Counter()
        for line in symbolize(path, "collapsed", *args).stdout.decode().splitlines():
            stack, n = line.rsplit(" ", 1)
            collapsed[tuple(stack.split(";")[1:])] += int(n)
        assert otlp_frames(req) == collapsed
    names = {s.attributes.get("thread.name") for s in samples(req)}
    assert {"format_cruncher", "format_sleeper"} <= names


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """tests/programs/labelled_units.rb (units of work named with Sdb.label) recorded whole by `record`."""
    from conftest import PROGRAMS, REPO, SIDECAR, ruby_cmd, ruby_env
    tmp = tmp_path_factory.mktemp("labelled")
    trace, log = tmp / "t.msgpack", tmp / "log.json"
    r = subprocess.run([*SIDECAR, "record", "-q", "-o", str(trace), "--", *ruby_cmd(PROGRAMS / "labelled_units.rb",
                                                                                 "2", str(log))],
                       capture_output=True, text=True, timeout=120, cwd=str(REPO), env=ruby_env())
    assert r.returncode == 0, r.stderr
    return trace


def test_a_real_recordings_units_of_work_are_the_endpoint_attributes(labelled):
    req = otlp(labelled, idle=True)
    check_dictionary(req)
    got = Counter()
    for s in samples(req):
        if s.type == "wall":
            got[s.attributes.get("sdb.endpoint")] += len(s.timestamps)
    want = Counter()
    for labels, _, values in pprof_samples(pprof(labelled, idle=True)):
        want[labels.get("endpoint")] += values[0]
    assert got == want and len(got) > 1, got
    assert sum(got.values()) == TraceFile(str(labelled)).tables.sample_count


# ------------------------------------------------------------------ the corpora
@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.msgpack")))
def test_format3_corpus_traces_decode_with_pprofs_totals(name):
    path = CORPUS / name
    for options in ({"idle": True}, {}, {"idle": True, "merge_processes": True}):
        req = otlp(path, **options)
        check_dictionary(req)
        rate = TraceFile(str(path)).tables.header.get("rate_hz") or 1000
        assert totals(req) == pprof_totals(pprof(path, **options), int(round(1e9 / rate)))


@pytest.mark.parametrize("name", sorted(p.name for p in FUZZ_CORPUS.glob("*.msgpack")))
def test_fuzz_corpus_traces_give_a_request_the_classes_read_or_a_documented_error(name, tmp_path, capsys):
    from sdb_symbolize import cli
    out = tmp_path / "out.pb"
    rc = cli.main([str(FUZZ_CORPUS / name), "-f", "otlp", "--idle", "-o", str(out), "--no-progress"])
    capsys.readouterr()
    assert rc in (0, 20, 21, 22, 23)
    if not out.exists():
        assert rc != 0
        return
    req = decode(out.read_bytes())
    check_dictionary(req)
    pp = tmp_path / "out.pb.gz"
    assert cli.main([str(FUZZ_CORPUS / name), "-f", "pprof", "--idle", "-o", str(pp), "--no-progress"]) == rc
    capsys.readouterr()
    p = Profile()
    p.ParseFromString(gzip.decompress(pp.read_bytes()))
    got = sum(len(s.timestamps) for s in samples(req) if s.type == "wall")
    assert got == sum(s.value[0] for s in p.sample)


def test_the_hand_encoding_reads_back_at_the_edges_of_each_field_kind():
    from opentelemetry.proto.profiles.v1development import profiles_pb2

    from sdb_symbolize.protowire import fixed64, message, packed_fixed64, packed_varints, string, uint
    for v in (1, 127, 128, 16383, 16384, 2**31 - 1, 2**63 - 1, -1, -5, -2**63):
        line = profiles_pb2.Line.FromString(uint(1, 3) + uint(2, v))
        assert (line.function_index, line.line) == (3, v)
    stamps = [0, 1, 2**63, 2**64 - 1]
    s = profiles_pb2.Sample.FromString(packed_varints(2, [0, 200, 70000]) + packed_fixed64(5, stamps))
    assert (list(s.attribute_indices), list(s.timestamps_unix_nano)) == ([0, 200, 70000], stamps)
    p = profiles_pb2.Profile.FromString(fixed64(3, 2**64 - 1) + message(7, b"\x00" * 15 + b"\x01"))
    assert (p.time_unix_nano, p.profile_id) == (2**64 - 1, b"\x00" * 15 + b"\x01")
    m = profiles_pb2.Mapping.FromString(uint(4, 9) + packed_varints(5, [1]))
    assert (m.filename_strindex, list(m.attribute_indices)) == (9, [1])
    d = profiles_pb2.ProfilesDictionary.FromString(string(5, "", keep=True) + string(5, "é\x1b\n;\ud800"))
    assert list(d.string_table) == ["", "é\x1b\n;\ufffd"]      # a lone surrogate cannot be UTF-8: replaced
