"""Always-on recording: `attach --rotate` closes the trace and starts the next, each file complete on
its own (sdb-symbolize reads it alone, every frame named), the files together holding what one
unrotated recording of the same seconds holds; only the newest --keep N stay."""
from __future__ import annotations

import glob
import os
import subprocess
import time
from io import BytesIO

import pytest

from conftest import REPO, SYMBOLIZE, samples_so_far, wait_for
from ebpf_wait import wait_for_ebpf
from sdb_trace import TraceFile, has_record, load_tables
from test_ebpf_symbolizer import ebpf_missing

pytestmark = pytest.mark.once       # the sidecar's own work: the same on every Ruby

SECONDS = 35


def files_of(stem) -> list:
    return sorted(glob.glob(f"{stem}.*.msgpack"))


def test_rotated_files_each_stand_alone_and_add_up_to_one_unrotated_recording(ruby_target, sidecar_process, tmp_path):
    # GIVEN a program with threads busy, asleep and waiting, recorded for 35 s by two sidecars at once:
    # one into a single trace, one with --rotate 10s
    target = ruby_target("eight_threads.rb")
    one, stem = tmp_path / "one.msgpack", tmp_path / "rot"
    plain = sidecar_process("attach", "--pid", str(target.pid), "-o", str(one), "-d", str(SECONDS), "-q",
                            "--no-ebpf")
    rotating = sidecar_process("attach", "--pid", str(target.pid), "-o", f"{stem}.msgpack", "-d", str(SECONDS),
                               "-q", "--no-ebpf", "--rotate", "10s")
    for p in (plain, rotating):
        _, err = p.communicate(timeout=SECONDS + 120)
        assert p.returncode == 0, err
    # THEN four files (10 s each, and the last 5 s), each a complete trace
    files = files_of(stem)
    assert len(files) == 4, files
    total = 0
    for k, f in enumerate(files):
        t = load_tables(f)
        assert t.error is None and t.end is not None, (f, t.error)
        assert t.end["reason"] == ("rotated" if k < len(files) - 1 else "duration"), t.end
        assert t.sample_count > 0 and t.end["samples"] == t.sample_count, (k, len(files), t.end, t.sample_count)
        total += t.sample_count
        # AND each is read alone, every frame of it named from its own records
        r = subprocess.run([*SYMBOLIZE, f, "--idle", "--no-lines"], capture_output=True, text=True, timeout=300,
                           cwd=str(REPO))
        assert r.returncode == 0 and r.stderr == "", (f, r.stderr)
        assert "(unknown" not in r.stdout and "(C function)" not in r.stdout, (f, r.stdout[:2000])
        assert "thread busy_thread (tid " in r.stdout, (f, r.stdout[:2000])
    # AND together they hold the samples of the one unrotated recording of the same seconds
    single = load_tables(str(one)).sample_count
    assert abs(total - single) <= 0.02 * single, (total, single)


def open_by_us(path) -> bool:
    """A descriptor of this process is open on path."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == path:
                return True
        except OSError:
            continue
    return False


def test_on_closed_sees_each_file_once_complete_and_closed_at_each_rotation_and_at_the_end(ruby_target, tmp_path):
    # GIVEN a recording in this process rotated every second, whose on_closed hook looks at each file
    # as it is handed over: whether a descriptor of ours is still open on it, its end record, and
    # what the symbolizer's library makes of it (every sample read, every frame named)
    from sdb_sidecar.recording.options import Options
    from sdb_sidecar.recording.recorder import TreeRecording
    from sdb_sidecar.target.target import open_target
    from sdb_symbolize.options import ProfileOptions
    from sdb_symbolize.profile import render
    target = ruby_target("eight_threads.rb")
    seen = []

    def on_closed(path):
        t = load_tables(path)
        profile = render(TraceFile(path), ProfileOptions(idle=True, lines=False), BytesIO())
        seen.append({"path": path, "open": open_by_us(path), "error": t.error,
                     "reason": t.end["reason"] if t.end else None, "samples": t.sample_count,
                     "end_samples": t.end["samples"] if t.end else None, "read": profile.samples_in,
                     "unnamed": profile.samples_unnamed})
    stem = tmp_path / "rot"
    # (the duration only bounds a run in which rotation never came: the test then fails below)
    rec = TreeRecording(open_target(target.pid, wait_s=5), f"{stem}.msgpack",
                        Options(rotate_s=1.0, duration_s=600, quiet=True, ebpf=False),
                        status_stream=open(os.devnull, "w"), on_closed=on_closed)
    # WHEN it runs until the hook has seen two rotated files, then is interrupted
    counts = rec.run(lambda: rec.tree.interrupt() if len(seen) >= 2 else None)
    # THEN the hook saw every file the recording wrote, each exactly once, in order: the two or more
    # rotated and then the last, at the end
    paths = [s["path"] for s in seen]
    assert paths == counts["files"] == files_of(stem), (paths, counts["files"], files_of(stem))
    assert len(paths) >= 3 and len(set(paths)) == len(paths), paths
    assert [s["reason"] for s in seen] == ["rotated"] * (len(seen) - 1) + ["interrupted"], seen
    # AND each was closed and complete when handed over: its end record written, its every sample
    # read by the symbolizer, every frame named
    for s in seen:
        assert not s["open"] and s["error"] is None, s
        assert s["samples"] > 0 and s["end_samples"] == s["samples"] == s["read"] and s["unnamed"] == 0, s


def test_on_closed_sees_the_one_file_of_a_recording_without_rotation_once_at_the_end(ruby_target, tmp_path):
    from sdb_sidecar.recording.options import Options
    from sdb_sidecar.recording.recorder import record
    from sdb_sidecar.target.target import open_target
    target = ruby_target("eight_threads.rb")
    out = str(tmp_path / "one.msgpack")
    seen = []

    def on_closed(path):
        t = load_tables(path)
        seen.append((path, open_by_us(path), t.error, t.end["reason"] if t.end else None))
    counts = record(open_target(target.pid, wait_s=5), out, Options(duration_s=1, quiet=True, ebpf=False),
                    status_stream=open(os.devnull, "w"), on_closed=on_closed)
    assert seen == [(out, False, None, "duration")] and counts["files"] == [out], (seen, counts)


def test_keep_leaves_the_newest_files_only(ruby_target, sidecar_process, tmp_path):
    target = ruby_target("eight_threads.rb")
    stem = tmp_path / "rot"
    p = sidecar_process("attach", "--pid", str(target.pid), "-o", f"{stem}.msgpack", "-d", "600", "-q", "--no-ebpf",
                        "--rotate", "1s", "--keep", "2")
    wait_for(lambda: len(files_of(stem)) >= 2 and samples_so_far(files_of(stem)[-1]) > 0, 120,
             what="two files")
    first = files_of(stem)[0]
    wait_for(lambda: first not in files_of(stem), 120, interval=0.2, what="the oldest file removed")
    time.sleep(0.5)
    p.send_signal(2)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    files = files_of(stem)
    assert len(files) == 2, files
    assert all(load_tables(f).end is not None for f in files)


def test_size_rotation_starts_a_new_file_once_one_holds_the_size(ruby_target, sidecar_process, tmp_path):
    target = ruby_target("eight_threads.rb")
    stem = tmp_path / "rot"
    p = sidecar_process("attach", "--pid", str(target.pid), "-o", f"{stem}.msgpack", "-d", "600", "-q", "--no-ebpf",
                        "--rotate", "64KiB", "-r", "5000")
    wait_for(lambda: len(files_of(stem)) >= 3, 180, interval=0.2, what="three files")
    p.send_signal(2)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    files = files_of(stem)
    for f in files[:-1]:
        t = load_tables(f)
        assert t.end is not None and t.end["reason"] == "rotated" and t.error is None


@pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")
def test_with_ebpf_a_later_file_restates_the_names_it_proves_still_hold(ruby_target, sidecar_process, tmp_path):
    # GIVEN a recording with eBPF, rotated every 2 s, running until eBPF is in and two more files began
    target = ruby_target("eight_threads.rb")
    stem = tmp_path / "rot"
    p = sidecar_process("attach", "--pid", str(target.pid), "-o", f"{stem}.msgpack", "-d", "600", "-q",
                        "--rotate", "2s")

    def attached_then_two_more():
        files = files_of(stem)
        first = next((k for k, f in enumerate(files) if has_record(f, "ebpf_attached")), None)
        return first is not None and len(files) >= first + 3
    wait_for_ebpf(p, attached_then_two_more, what="eBPF attached and two more files", interval=0.5)
    p.send_signal(2)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    # THEN a file after eBPF came names what it samples from the earlier file's names ("restated",
    # no read of the target), and every file still stands alone, every frame named
    sources = set()
    for f in files_of(stem):
        r = subprocess.run([*SYMBOLIZE, f, "--idle", "--no-lines"], capture_output=True, text=True, timeout=300,
                           cwd=str(REPO))
        assert r.returncode == 0 and "(unknown" not in r.stdout, (f, r.stderr, r.stdout[:1000])
        t = load_tables(f)
        sources |= {s.source for syms in t.iseqs.values() for s in syms}
    assert "restated" in sources, sources
