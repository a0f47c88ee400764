"""`sdb-sidecar agent`: one per host, it finds every process that runs the gem (one of the host's,
one in its own pid and mount namespaces with a private /dev/shm and a container's cgroup, one started
after the agent), records each from its registry's appearance to its exit and pushes its profiles
(the loopback receiver of tests/support/push_receiver.py) labelled with its service, pid and
container; a process killed mid-way has its last interval pushed, then nothing more; SIGTERM pushes
every process's last interval and exits 0."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import otlp_decode
from app_servers import debian_gems_env, free_port, listening
from conftest import SDB_RUBY, SDB_RUBY_ARGS, read_trace, ruby_env, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from push_receiver import PushReceiver, decode_pprof  # noqa: E402

pytestmark = [pytest.mark.once,     # the agent's discovery and push: the same on every Ruby
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                 reason="the container is made with unshare and a cgroup, as root")]

# a busy thread and a blocked one; "ready" once both run
APP = """require "sdb"
def spin(n) = n + 1
def busy_loop
  i = 0
  i = spin(i) while true
end
Thread.new { Thread.current.name = "busy"; busy_loop }
Thread.new { Thread.current.name = "blocked"; Queue.new.pop }
sleep 0.2
$stdout.puts "ready"
$stdout.flush
sleep
"""
# the container's first process: its own /dev/shm, then the app as pid 1 of its pid namespace
CONTAINER_INIT = 'mount -t tmpfs -o mode=1777,size=16m sdb-agent-shm /dev/shm && exec "$@"'
PIDS_CGROUP = Path("/sys/fs/cgroup/pids")


class Apps:
    """The test's Ruby programs (each a script named sdbagent_<what>.rb: its service name is
    sdbagent_<what>), killed at teardown; the container's cgroup removed."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.procs = []
        self.cgroups = []

    def script(self, what: str) -> Path:
        path = self.tmp / f"sdbagent_{what}.rb"
        path.write_text(APP)
        return path

    def start(self, argv, env=None, ready: bool = True) -> subprocess.Popen:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, cwd=str(self.tmp), env=env or ruby_env(), start_new_session=True)
        self.procs.append(p)
        if ready:
            assert p.stdout.readline().strip() == "ready"
        return p

    def cgroup(self, *parts: str) -> Path:
        """A new pids cgroup PIDS_CGROUP/sdbagent-<what>-<random>/<parts...> (removed at teardown)."""
        group = PIDS_CGROUP / f"sdbagent-{uuid.uuid4().hex[:8]}"
        leaf = group.joinpath(*parts)
        leaf.mkdir(parents=True)
        self.cgroups += [leaf] + [q for q in leaf.parents if q == group or group in q.parents]
        return leaf

    @staticmethod
    def joined(leaf: Path, argv) -> list:
        """argv run in the cgroup from its start: the shell joins it, then becomes argv."""
        return ["sh", "-c", f'echo $$ > {leaf}/cgroup.procs && exec "$@"', "sh", *argv]

    def plain(self, what: str) -> int:
        return self.start([SDB_RUBY, *SDB_RUBY_ARGS, str(self.script(what))]).pid

    def container(self, what: str, container_id: str, pod_uid: str) -> int:
        """The app as pid 1 of its own pid and mount namespaces with a private /dev/shm, in a cgroup
        laid out as the kubelet's cgroupfs driver lays out a pod's container; its host pid."""
        leaf = self.cgroup("kubepods", "besteffort", f"pod{pod_uid}", container_id)
        p = self.start(self.joined(leaf, ["unshare", "--pid", "--mount", "--fork", "--mount-proc", "sh", "-c",
                                          CONTAINER_INIT, "sh", SDB_RUBY, *SDB_RUBY_ARGS, str(self.script(what))]))
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            return int(f.read().split()[0])

    def close(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)
            p.stdout.close()
        for c in sorted(self.cgroups, key=lambda q: len(q.parts), reverse=True):
            wait_for(lambda: not (c / "cgroup.procs").exists() or not (c / "cgroup.procs").read_text().strip(),
                     30, what=f"{c} emptied")
            c.rmdir()


@pytest.fixture
def apps(tmp_path):
    a = Apps(tmp_path)
    yield a
    a.close()


@pytest.fixture
def receiver():
    r = PushReceiver()
    yield r
    r.close()


def walls(receiver, service):
    """The series labels and raw pprof of each wall profile of `service` received so far."""
    return [(labels, raw) for rec in list(receiver.received) for labels, raw in rec.profiles()
            if labels.get("service_name") == service and labels.get("__name__") == "wall"]


def resources(receiver):
    """The resource attributes of every OTLP request's resources received so far."""
    return [otlp_decode.resource_attributes(rp) for rec in list(receiver.received) if rec.endpoint == "otlp"
            for rp in rec.otlp.resource_profiles]


_decoded = {}


def decoded(raw: bytes) -> dict:
    """decode_pprof, once per profile (each decode runs node and go)."""
    if raw not in _decoded:
        _decoded[raw] = decode_pprof(raw)
    return _decoded[raw]


def pushed_samples(receiver, service) -> int:
    return sum(s["value"][0] for _, raw in walls(receiver, service) for s in decoded(raw)["samples"])


def trace_of(out_dir: Path, service: str) -> Path:
    (path,) = out_dir.glob(f"{service}.*.msgpack")
    return path


def test_every_app_is_pushed_with_its_labels_until_it_exits_and_sigterm_flushes(apps, receiver, sidecar_process,
                                                                              tmp_path):
    out = tmp_path / "traces"
    out.mkdir()
    container_id, pod_uid = uuid.uuid4().hex * 2, str(uuid.uuid4())
    # GIVEN an app of the host's and one in a container, both running before the agent starts
    plain = apps.plain("plain")
    boxed = apps.container("boxed", container_id, pod_uid)
    # WHEN the agent runs (the machine's other Ruby programs left out by --include)
    agent = sidecar_process("agent", "--push", f"pyroscope={receiver.url}", "--push", f"otlp={receiver.url}",
                            "--push-interval", "5", "-o", str(out), "--include", "sdbagent_*")
    wait_for(lambda: "sdb: agent: started" in agent.stderr_so_far(), 60, what="the agent's start")
    # AND an app starts after it
    late = apps.plain("late")
    # THEN each one's profiles arrive, under its service, to both backends
    for service in ("sdbagent_plain", "sdbagent_boxed", "sdbagent_late"):
        wait_for(lambda: walls(receiver, service), 60, what=f"a profile of {service}")
        wait_for(lambda: [a for a in resources(receiver) if a["service.name"] == service], 60,
                 what=f"an OTLP profile of {service}")
    assert receiver.errors == []
    # AND the container's carry its container id and pod uid as series labels, the others none
    for labels, _ in walls(receiver, "sdbagent_boxed"):
        assert labels == {"service_name": "sdbagent_boxed", "__name__": "wall", "container_id": container_id,
                          "pod_uid": pod_uid}, labels
    for service in ("sdbagent_plain", "sdbagent_late"):
        assert all(set(labels) == {"service_name", "__name__"} for labels, _ in walls(receiver, service))
    # AND OTLP's resources say the same: container.id and k8s.pod.uid for the container's process alone
    for a in resources(receiver):
        if a["service.name"] == "sdbagent_boxed":
            assert (a["container.id"], a["k8s.pod.uid"], a["process.pid"]) == (container_id, pod_uid, boxed), a
        else:
            assert "container.id" not in a and "k8s.pod.uid" not in a, a
    # AND each sample's pid is its process's pid on the host (the container's is not its own pid 1)
    for service, pid in (("sdbagent_plain", plain), ("sdbagent_boxed", boxed), ("sdbagent_late", late)):
        pids = {s["labels"]["pid"] for _, raw in walls(receiver, service) for s in decoded(raw)["samples"]}
        assert pids == {str(pid)}, (service, pids)
    assert len({plain, boxed, late}) == 3 and boxed != 1

    # WHEN the late app is killed mid-way
    os.kill(late, signal.SIGKILL)
    wait_for(lambda: f"process {late} (sdbagent_late) done" in agent.stderr_so_far(), 60,
             what="the agent's line for the killed app")
    # THEN every sample its trace holds was pushed (its last interval too) ...
    late_trace = read_trace(trace_of(out, "sdbagent_late"))
    assert late_trace.end["reason"] == "target-exited"
    assert pushed_samples(receiver, "sdbagent_late") == len(late_trace.samples) > 0
    # ... and nothing more comes for it while the others' profiles go on arriving
    sent = len(walls(receiver, "sdbagent_late"))
    before = len(walls(receiver, "sdbagent_plain"))
    wait_for(lambda: len(walls(receiver, "sdbagent_plain")) >= before + 2, 60, what="two more intervals pushed")
    assert len(walls(receiver, "sdbagent_late")) == sent

    # WHEN the agent gets SIGTERM
    agent.send_signal(signal.SIGTERM)
    _, err = agent.communicate(timeout=120)
    # THEN it exits 0 once every recording's last interval is pushed and its trace closed
    assert agent.returncode == 0, err
    assert "Traceback" not in err, err
    for service in ("sdbagent_plain", "sdbagent_boxed"):
        t = read_trace(trace_of(out, service))
        assert t.end["reason"] == "interrupted", (service, t.end)
        assert pushed_samples(receiver, service) == len(t.samples) > 0, service
    assert read_trace(trace_of(out, "sdbagent_boxed")).header["container_id"] == container_id
    assert receiver.errors == []


def test_a_puma_cluster_is_one_tree_whose_workers_are_pushed_under_its_service(apps, receiver, sidecar_process,
                                                                              tmp_path):
    from sdb_sidecar.target.tree import children_of
    # GIVEN puma in cluster mode, 2 workers forked from a master that loaded the gem, in a cgroup of its own
    (tmp_path / "config.ru").write_text('require "sdb"\nrun ->(env) { [200, {}, ["ok"]] }\n')
    port = free_port()
    leaf = apps.cgroup("puma")
    puma = apps.start(apps.joined(leaf, [SDB_RUBY, "-S", "puma", "-w", "2", "--preload", "-b",
                                         f"tcp://127.0.0.1:{port}", str(tmp_path / "config.ru")]),
                      env=debian_gems_env(), ready=False)
    wait_for(lambda: listening(port) and len(children_of(puma.pid)) == 2, 90, what="puma's 2 workers")
    workers = children_of(puma.pid)
    # WHEN the agent starts, picking it by its cgroup path
    agent = sidecar_process("agent", "--push", f"pyroscope={receiver.url}", "--push-interval", "2",
                            "--include", f"/{leaf.parent.name}/*")
    # THEN both workers' samples arrive under the master's service, puma
    def pids_pushed():
        return {s["labels"]["pid"] for _, raw in walls(receiver, "puma") for s in decoded(raw)["samples"]}
    wait_for(lambda: {str(w) for w in workers} <= pids_pushed(), 90, interval=0.5, what="both workers' samples")
    assert pids_pushed() <= {str(p) for p in (puma.pid, *workers)}
    # AND the master's recording follows its workers: one recording, not three
    agent.send_signal(signal.SIGTERM)
    _, err = agent.communicate(timeout=120)
    assert agent.returncode == 0, err
    assert [line for line in err.splitlines() if "sdb: agent: recording process" in line] == \
        [line for line in err.splitlines() if f"sdb: agent: recording process {puma.pid} " in line], err
    assert f"process {puma.pid} (puma) done (interrupted)" in err and "in 3 processes" in err, err
    assert receiver.errors == []


def test_over_its_cpu_budget_the_agent_lowers_its_rate_and_says_so(apps, sidecar_process, tmp_path):
    out = tmp_path / "traces"
    out.mkdir()
    # GIVEN an app with a busy thread, and an agent allowed far less CPU than recording it at 100 Hz takes
    pid = apps.plain("budget")
    agent = sidecar_process("agent", "-o", str(out), "--include", "sdbagent_budget", "--max-cpu", "0.01")
    # THEN after its first window it says it lowers the rate (to its floor, 10 Hz) ...
    wait_for(lambda: "rate lowered from 100 to 10 Hz" in agent.stderr_so_far(), 90, interval=0.2,
             what="the agent's notice")
    # ... and the app's recording restarts at it: a second trace, at 10 Hz, of the same process
    wait_for(lambda: len(list(out.glob("sdbagent_budget.*.msgpack"))) == 2, 60, what="the second recording")
    agent.send_signal(signal.SIGTERM)
    _, err = agent.communicate(timeout=120)
    assert agent.returncode == 0, err
    traces = sorted((read_trace(p) for p in out.glob("sdbagent_budget.*.msgpack")),
                    key=lambda t: t.header["start_mono_ns"])
    assert [t.header["rate_hz"] for t in traces] == [100.0, 10.0], [t.header["rate_hz"] for t in traces]
    assert all(t.header["pid"] == pid and t.samples for t in traces)
