"""The agent's pure parts: a process's container and pod from its cgroup path, as each runtime and
the kubelet name them (and nothing from a path that names none), --include/--exclude, and a registry
looked at before the gem has filled it (looked at again, not left out)."""
from __future__ import annotations

from sdb_sidecar.agent.cgroup import parse
from sdb_sidecar.agent.selection import Selection

ID = "0123456789abcdef" * 4
UID = "6b2d1f4e-8a1c-4e2b-9f3d-5c7a0b1e2d3f"


def test_each_runtime_s_cgroup_path_names_its_container():
    for path in (f"/docker/{ID}", f"/system.slice/docker-{ID}.scope",
                 f"/machine.slice/libpod-{ID}.scope",
                 f"/kubepods.slice/kubepods-besteffort.slice/crio-{ID}.scope"):
        c = parse(f"0::{path}\n")
        assert c.container_id == ID, path
        assert c.paths == (path,)


def test_a_pod_s_uid_comes_from_the_kubelet_s_slice_or_directory():
    systemd = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
               f"cri-containerd-{ID}.scope\n")
    cgroupfs = f"0::/kubepods/burstable/pod{UID}/{ID}\n"
    for text in (systemd, cgroupfs):
        c = parse(text)
        assert (c.container_id, c.pod_uid) == (ID, UID)
        assert c.labels() == {"container_id": ID, "pod_uid": UID}


def test_v1_hierarchies_are_read_when_v2_names_no_container():
    c = parse(f"12:pids:/kubepods/besteffort/pod{UID}/{ID}\n1:name=systemd:/\n0::/\n")
    assert (c.container_id, c.pod_uid) == (ID, UID)
    assert c.paths == ("/", f"/kubepods/besteffort/pod{UID}/{ID}")


def test_a_path_that_names_no_container_gives_no_label():
    for text in ("0::/\n", "0::/user.slice/user-1000.slice/session-2.scope\n",
                 f"0::/system.slice/crio-conmon-{ID}.scope\n",          # cri-o's monitor, not the container
                 "4:memory:/process_api/87efd171f7c0b2f675522c8ae91535a6\n",   # 32 hex digits: not a container id
                 f"0::/docker/{ID[:-1]}\n", ""):
        c = parse(text)
        assert (c.container_id, c.pod_uid) == (None, None), text
        assert c.labels() == {}


def test_include_and_exclude_match_the_service_or_a_cgroup_path():
    everything = Selection()
    assert everything.wants("web", ("/",))
    only_web = Selection(include=["web*"])
    assert only_web.wants("web-api", ("/",)) and not only_web.wants("worker", ("/",))
    by_cgroup = Selection(include=["/kubepods/*"], exclude=["*/pod" + UID + "/*"])
    assert by_cgroup.wants("anything", ("/", f"/kubepods/burstable/podX/{ID}"))
    assert not by_cgroup.wants("anything", (f"/kubepods/burstable/pod{UID}/{ID}",))
    assert not by_cgroup.wants("anything", ("/system.slice/x.scope",))
    assert not Selection(exclude=["sidekiq"]).wants("sidekiq", ())


def test_a_trace_s_container_and_pod_become_otlp_resource_attributes(tmp_path):
    from otlp_decode import decode, resource_attributes
    from sdb_symbolize.options import ProfileOptions
    from sdb_symbolize.profile import render_bytes
    from sdb_trace import KIND_RUBY, STATE_RUNNING, TraceFile, TraceWriter
    start = 7_000_000_000
    header = {"pid": 500, "ruby": "3.4.5", "ruby_description": "ruby 3.4.5", "layout": "3.4", "rate_hz": 100,
              "start_mono_ns": start, "start_wall_ns": 1_750_000_000_000_000_000, "hostname": "node-1",
              "command": ["ruby", "app.rb"], "container_id": ID, "pod_uid": UID}
    path = tmp_path / "trace.msgpack"
    with open(path, "wb") as f:
        w = TraceWriter(f, header)
        w.thread(1, 500, "", start, 1, start)
        w.iseq(0x1000, "<main>", "<main>", "/app/app.rb", None, 1, 0, start)
        w.frames(0, [KIND_RUBY], [0x1000], [0x1010], [0], [2])
        w.stacks(0, [[0]])
        w.samples(start, [0, 10_000_000], [1, 1], [0, 0], [STATE_RUNNING] * 2)
        w.end(at_ns=start + 20_000_000, reason="interrupted", samples=2)
    req = decode(render_bytes(TraceFile(str(path)), ProfileOptions(format="otlp", service="app")))
    (rp,) = req.resource_profiles
    attrs = resource_attributes(rp)
    assert (attrs["service.name"], attrs["container.id"], attrs["k8s.pod.uid"]) == ("app", ID, UID)


def test_a_registry_seen_before_the_gem_has_filled_it_is_looked_at_again_not_left_out(monkeypatch):
    # GIVEN an agent that looks at a new app's registry the moment it is created (the directory
    # watch wakes it then), while the gem has not sized it yet: "too small to be an sdb registry"
    import io
    from types import SimpleNamespace
    from sdb_sidecar.agent import agent as agent_mod
    from sdb_sidecar.errors import Exit, SdbError

    def empty(pid, wait_s=0):
        raise SdbError(f"/dev/shm/sdb-{pid} is too small to be an sdb registry", Exit.REGISTRY_FORMAT)
    monkeypatch.setattr(agent_mod, "open_target", empty)
    a = agent_mod.Agent.__new__(agent_mod.Agent)
    a.pending, a.refused, a.left_out, a.stream = {}, {}, 0, io.StringIO()
    c, key = SimpleNamespace(pid=4242), (1, 2)
    # WHEN it tries it, and again within PENDING_GIVE_UP_S
    a._try(c, key, 100.0)
    a._try(c, key, 100.0 + agent_mod.PENDING_GIVE_UP_S / 2)
    # THEN it is pending, not refused, and nothing is said
    assert (4242 in a.pending, a.refused, a.left_out, a.stream.getvalue()) == (True, {}, 0, "")
    # AND a registry still unreadable after PENDING_GIVE_UP_S is left out with one line that says why
    a._try(c, key, 100.0 + agent_mod.PENDING_GIVE_UP_S + 1)
    assert (a.refused, a.left_out) == ({4242: key}, 1)
    assert a.stream.getvalue().count("\n") == 1 and "too small" in a.stream.getvalue()
