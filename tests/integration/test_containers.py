"""An app in a container, reached from the host by its host pid: a real Ruby process in its own pid
and mount namespaces (`unshare --pid --mount --fork --mount-proc`, what Docker and Kubernetes give a
container) with a private tmpfs on /dev/shm, so its registry is /dev/shm/sdb-1 in its own mounts and
nowhere on the host's /dev/shm. `snapshot`, `attach` (with eBPF naming) and `top` work by the host
pid; without CAP_SYS_PTRACE the error names it. Runs on the Ruby under test (on 3.1 the thread
states come from procfs: the container's own, by the container's thread ids)."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections import Counter
from typing import List

import pytest

from conftest import PROGRAMS, SDB_RUBY, SDB_RUBY_ARGS, SIDECAR, REPO, RubyTarget, read_trace, ruby_env, wait_for
from sdb_trace import STATE_BLOCKED, STATE_RUNNING
from terminal import Tmux, samples_shown
from test_ebpf_symbolizer import ebpf_missing, sample_on_then_stop, sampled_labels, start_recording

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="containers are made with unshare, as root")

# the shell run as the container's first process: its own /dev/shm, then the app as pid 1 (as in a
# container without an init); "$@" is the app's command line
CONTAINER_INIT = 'mount -t tmpfs -o mode=1777,size=16m sdb-test-shm /dev/shm && exec "$@"'


class ContainerApp(RubyTarget):
    """A Ruby program as pid 1 of its own pid namespace; .pid is its pid on the host."""

    def __init__(self, proc: subprocess.Popen, program: str, stderr_path):
        super().__init__(proc, program, stderr_path)
        self.unshare_pid = proc.pid
        self.pid = 0

    def find_host_pid(self, timeout: float = 20) -> int:
        def child():
            try:
                with open(f"/proc/{self.unshare_pid}/task/{self.unshare_pid}/children") as f:
                    kids = f.read().split()
            except OSError:
                return 0
            return int(kids[0]) if kids else 0
        def is_ruby(pid: int) -> bool:
            try:
                return os.path.realpath(os.readlink(f"/proc/{pid}/exe")) == os.path.realpath(SDB_RUBY)
            except OSError:
                return False
        wait_for(lambda: child() and is_ruby(child()), timeout, what="the container's first process")
        self.pid = child()
        return self.pid

    def stop(self) -> None:
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)   # pid 1 of its namespace: the namespace goes with it
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _ns_pid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except OSError:
        pass
    return 0


@pytest.fixture
def container_app(tmp_path):
    """Factory: container_app("top_target.rb", *args, own_proc=True, own_pids=True) starts the program
    in a new pid and mount namespace with its own /dev/shm (and its own /proc unless own_proc=False;
    own_pids=False: a mount namespace only, as another container of a pod sharing its pids sees
    it), waits for its "ready" line and returns it (.pid: the host pid). Killed at teardown."""
    started: List[ContainerApp] = []

    def start(program: str, *args: str, own_proc: bool = True, own_pids: bool = True) -> ContainerApp:
        stderr_path = tmp_path / f"container-{len(started)}.stderr"
        unshare = (["unshare", "--pid", "--mount", "--fork"] + (["--mount-proc"] if own_proc else []) if own_pids
                   else ["unshare", "--mount", "--fork"])
        with open(stderr_path, "w") as err:
            proc = subprocess.Popen([*unshare, "sh", "-c", CONTAINER_INIT, "sh", SDB_RUBY, *SDB_RUBY_ARGS,
                                     str(PROGRAMS / program), *args], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err, text=True, cwd=str(tmp_path),
                                    env=ruby_env())
        app = ContainerApp(proc, program, stderr_path)
        started.append(app)
        app.find_host_pid()
        app.ready_line = app.wait_for_line("ready", 30)
        return app

    yield start
    for app in started:
        app.stop()
        for stream in (app.proc.stdin, app.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


def sidecar(*args: str, drop_ptrace: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [*SIDECAR, *args]
    if drop_ptrace:
        cmd = ["capsh", "--drop=cap_sys_ptrace", "--", "-c", 'exec "$@"', "sh", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(REPO),
                          stdin=subprocess.DEVNULL)


def test_the_container_has_its_own_registry_and_no_host_one(container_app):
    # GIVEN an app in its own namespaces: the precondition the other tests stand on
    app = container_app("top_target.rb")
    # THEN its registry is in its own /dev/shm (as pid 1), and the host's /dev/shm has none by its pid
    assert app.pid > 1 and _ns_pid(app.pid) == 1
    assert os.path.exists(f"/proc/{app.pid}/root/dev/shm/sdb-1")
    assert not os.path.exists(f"/dev/shm/sdb-{app.pid}")


def test_snapshot_by_host_pid_shows_the_threads_by_the_containers_ids(container_app):
    # GIVEN top_target.rb in a container: a busy main thread and a thread blocked in top_nap
    app = container_app("top_target.rb")
    # WHEN snapshot is given its host pid
    r = sidecar("snapshot", "--pid", str(app.pid), "--json")
    # THEN it finds the registry in the container and shows both threads, by the container's ids
    assert r.returncode == 0, r.stderr
    snap = json.loads(r.stdout)
    assert snap["pid"] == app.pid, snap
    threads = {t["name"]: t for t in snap["threads"]}
    assert set(threads) == {None, "top_sleeper"}, threads
    assert threads[None]["native_id"] == 1, threads         # the app is pid 1 of its namespace
    labels = [f["label"] for f in threads["top_sleeper"]["frames"]]
    assert "Object#top_nap" in labels, labels
    assert "Object#top_caller" in [f["label"] for f in threads[None]["frames"]] or \
        threads[None]["frames"][-1]["label"] == "<main>", threads[None]["frames"]


def test_an_app_with_its_own_mounts_in_our_pid_namespace_is_found_by_its_pid(container_app):
    # GIVEN an app with its own mounts and /dev/shm but our pids (a pod with shareProcessNamespace,
    # seen from its other container)
    app = container_app("top_target.rb", own_pids=False)
    assert _ns_pid(app.pid) == app.pid and not os.path.exists(f"/dev/shm/sdb-{app.pid}")
    # WHEN snapshot is given its pid
    r = sidecar("snapshot", "--pid", str(app.pid), "--json")
    # THEN its registry is found in its own /dev/shm and its threads are shown
    assert r.returncode == 0, r.stderr
    snap = json.loads(r.stdout)
    assert {t["name"] for t in snap["threads"]} == {None, "top_sleeper"}, snap
    assert {t["native_id"] for t in snap["threads"] if t["name"] is None} == {app.pid}


@pytest.mark.parametrize("own_proc", [True, False], ids=["own /proc", "host /proc"])
def test_attach_by_host_pid_gives_each_thread_its_state(container_app, tmp_path, own_proc):
    # GIVEN top_target.rb in a container, with its own /proc or (a container made without one) the
    # host's, where the container's thread ids name other processes' threads
    app = container_app("top_target.rb", own_proc=own_proc)
    out = tmp_path / "trace.msgpack"
    # WHEN it is recorded by its host pid
    r = sidecar("attach", "--pid", str(app.pid), "-o", str(out), "--duration", "2", "-q", "--no-ebpf")
    # THEN the sleeping thread is blocked in every sample, the busy one running in most
    assert r.returncode == 0, r.stderr
    trace = read_trace(out)
    sleeper = trace.serial_named("top_sleeper")
    main = next(s for s, t in trace.threads.items() if t["tid"] == 1)
    states = Counter(s[3] for s in trace.samples_of(sleeper))
    assert states and set(states) == {STATE_BLOCKED}, states
    busy = Counter(s[3] for s in trace.samples_of(main))
    assert busy[STATE_RUNNING] >= 0.8 * sum(busy.values()), busy


@pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")
def test_attach_by_host_pid_records_and_names_with_ebpf(container_app, sidecar_process, tmp_path):
    # GIVEN an app in a container that defines and runs methods once the recording is on
    # WHEN it is recorded by its host pid, the eBPF symbolizer is attached and the app loads its methods
    app, rec, out = start_recording(container_app, sidecar_process, tmp_path, "eval_after_attach.rb")
    (tmp_path / "load").mkdir()
    app.send(f"go {tmp_path / 'load'}\n")
    app.wait_for_line("ran ", timeout=60)
    err = sample_on_then_stop(rec, out)
    # THEN the trace is the container's app's, with its methods named from eBPF and sampled
    assert "notice" not in err, err
    trace = read_trace(out)
    assert trace.header["pid"] == app.pid
    assert trace.end["ebpf"] is not None and trace.end["reason"] == "interrupted", trace.end
    ebpf_named = {r["label"] for r in trace.records if r["t"] == "iseq" and r["source"] == "ebpf"}
    assert "sdb_loaded_method" in ebpf_named, sorted(ebpf_named)[:20]
    assert "sdb_loaded_method" in sampled_labels(trace)
    assert {r["tid"] for r in trace.records if r["t"] == "thread"} == {1}


@pytest.mark.once
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/setup-machine installs it)")
def test_top_by_host_pid_shows_the_container_apps_hot_functions(container_app):
    # GIVEN top_target.rb in a container
    app = container_app("top_target.rb")
    tmux = Tmux(f"sdb-test-ctr-{os.getpid()}-{time.monotonic_ns()}")
    try:
        # WHEN top is run by its host pid
        tmux.type_line(f"{shlex.join([*SIDECAR, 'top', '--pid', str(app.pid)])}; echo TOP-EXIT=$?")
        screen = tmux.wait_screen(lambda s: "top_leaf_warm" in s and samples_shown(s) >= 150, "150 samples", 60)
        # THEN it shows the app, its two threads by state, and its hot functions
        assert f"sdb top: pid {app.pid}" in screen, screen
        assert re.search(r"Threads: 2 +running 1, waiting for GVL 0, blocked 1", screen), screen
        assert "top_leaf_hot" in screen, screen
        tmux.send("q")
        tmux.wait_screen(lambda s: "TOP-EXIT=0" in s, "top exits 0")
    finally:
        tmux.kill()


@pytest.mark.parametrize("command", ["snapshot", "attach", "top"])
def test_without_cap_sys_ptrace_the_error_names_it(container_app, tmp_path, command):
    # GIVEN an app in a container, and a sidecar run as root but without CAP_SYS_PTRACE
    app = container_app("top_target.rb")
    args = {"snapshot": [], "attach": ["-o", str(tmp_path / "t.msgpack"), "--duration", "1"], "top": []}[command]
    # WHEN it is pointed at the app's host pid
    r = sidecar(command, "--pid", str(app.pid), *args, drop_ptrace=True)
    # THEN it exits 9 (permission) with one line that names the capability, and writes nothing
    assert r.returncode == 9, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "CAP_SYS_PTRACE" in lines[0], r.stderr
    assert not (tmp_path / "t.msgpack").exists()
    assert app.alive()


@pytest.mark.parametrize("own_proc", [True, False], ids=["own /proc", "host /proc"])
def test_the_threads_are_looked_up_in_the_containers_own_procfs_or_nowhere(container_app, own_proc):
    # GIVEN an app in a container, with its own /proc or with the host's (where its pid, 1, is init's)
    app = container_app("top_target.rb", own_proc=own_proc)
    from sdb_sidecar.target.target import place_of, task_dir_of
    # WHEN the sidecar works out where procfs lists its threads by the container's thread ids
    place = place_of(app.pid)
    task_dir = task_dir_of(place)
    # THEN it is the container's own procfs, whose thread 1 is the app's main thread, or none at all
    # (never /proc/1/task of the host, which is init's)
    assert (place.ns_pid, place.registry) == (1, f"/proc/{app.pid}/root/dev/shm/sdb-1")
    if own_proc:
        assert task_dir == f"/proc/{app.pid}/root/proc/1/task"
        with open(f"{task_dir}/1/stat") as theirs, open(f"/proc/{app.pid}/stat") as ours:
            assert theirs.read().split(")")[1].split()[19] == ours.read().split(")")[1].split()[19]
    else:
        assert task_dir == ""
