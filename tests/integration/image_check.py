"""On demand, by `scripts/image-rootfs check` (which builds the image's root filesystem first and
names it in $SDB_IMAGE_ROOTFS; make test does not collect this file: its name is not test_*): the
agent run from deploy/Dockerfile's root filesystem as deploy/sdb-agent.yaml's DaemonSet runs it (its
own mount namespace, the node's /proc, a private /dev/shm, read-only root and /sys, the manifest's
capabilities alone, its arguments with the push URLs pointed at the loopback receiver) finds Ruby
apps of this host that run as another user, one of them in a container, and pushes their profiles
with their service, container and pod labels; each capability the manifest adds is needed."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml

from sdb_sidecar.errors import Exit

from conftest import SDB_RUBY, SDB_RUBY_ARGS, wait_for
from test_agent import APP, CONTAINER_INIT, Apps, decoded, receiver, resources, walls  # noqa: F401 (receiver: its fixture)

REPO = Path(__file__).resolve().parents[2]
ROOTFS = os.environ.get("SDB_IMAGE_ROOTFS", "")
# the apps run as nobody: reading them takes the capabilities a container's root has, not root's own
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def image_rootfs():
    loader = importlib.machinery.SourceFileLoader("sdb_image_rootfs", str(REPO / "scripts" / "image-rootfs"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("sdb_image_rootfs", loader))
    sys.modules["sdb_image_rootfs"] = module
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rootfs() -> Path:
    if not ROOTFS or not (Path(ROOTFS) / entrypoint()[0].lstrip("/")).exists():
        pytest.fail("no image root filesystem: run this check with `scripts/image-rootfs check`")
    return Path(ROOTFS)


@pytest.fixture(scope="module")
def manifest() -> dict:
    (ds,) = [d for d in yaml.safe_load_all((REPO / "deploy" / "sdb-agent.yaml").read_text()) if d]
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return c


class AppsOfNobody(Apps):
    """test_agent's apps, run as the user nobody from a directory all can read, each a script named
    sdbimage_<what>.rb (its service: test_agent's own are sdbagent_*, and may run beside this check)."""

    def script(self, what: str) -> Path:
        path = self.tmp / f"sdbimage_{what}.rb"
        path.write_text(APP)
        path.chmod(0o644)
        return path

    def plain(self, what: str) -> int:
        return self.start([*AS_NOBODY, SDB_RUBY, *SDB_RUBY_ARGS, str(self.script(what))]).pid

    def container(self, what: str, container_id: str, pod_uid: str) -> int:
        leaf = self.cgroup("kubepods", "besteffort", f"pod{pod_uid}", container_id)
        p = self.start(self.joined(leaf, ["unshare", "--pid", "--mount", "--fork", "--mount-proc", "sh", "-c",
                                          CONTAINER_INIT, "sh", *AS_NOBODY, SDB_RUBY, *SDB_RUBY_ARGS,
                                          str(self.script(what))]))
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            return int(f.read().split()[0])

    def close(self) -> None:
        """SIGTERM first: the gem removes its registry at exit (the host's app's is in this host's
        /dev/shm), then test_agent's SIGKILL for what is left."""
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        super().close()


@pytest.fixture
def apps():
    d = Path(tempfile.mkdtemp(prefix="sdb-image-apps-"))
    d.chmod(0o755)
    a = AppsOfNobody(d)
    yield a
    a.close()
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


def in_image(rootfs: Path, caps, argv) -> list:
    """argv run in the image's root filesystem as the DaemonSet's container runs: read-only root and
    /sys, the node's /proc (the host's pid namespace: hostPID), a /dev/shm of its own, `caps` alone."""
    m = image_rootfs()
    return m.chroot_argv(rootfs, m.clean_env_argv(m.capabilities_argv(caps, argv)), read_only=True)


def entrypoint() -> list:
    """The image's ENTRYPOINT, as the Dockerfile says (`sdb-sidecar agent`)."""
    m = image_rootfs()
    return m.entrypoint(m.parse(m.DOCKERFILE.read_text()))


def pointed_at(args, url: str) -> list:
    """The manifest's arguments, each --push URL replaced by the receiver's (its KIND kept)."""
    out = list(args)
    for i, a in enumerate(out[:-1]):
        if a == "--push":
            out[i + 1] = f"{out[i + 1].partition('=')[0]}={url}"
    return out


def test_the_agent_from_the_image_pushes_every_app_with_its_labels(rootfs, manifest, apps, receiver):
    container_id, pod_uid = uuid.uuid4().hex * 2, str(uuid.uuid4())
    # GIVEN two apps of another user, one of the host's and one in a container with its own /dev/shm
    plain = apps.plain("plain")
    boxed = apps.container("boxed", container_id, pod_uid)
    caps = manifest["securityContext"]["capabilities"]["add"]
    # WHEN the image's entrypoint runs with the manifest's arguments (pushing every 5 s, and only
    # this check's apps: the machine runs other Ruby programs)
    argv = in_image(rootfs, caps, [*entrypoint(), *pointed_at(manifest["args"], receiver.url),
                                   "--push-interval", "5", "--include", "sdbimage_*"])
    err_path = rootfs.parent / "check-agent.stderr"
    with open(err_path, "w") as err:
        agent = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                 start_new_session=True)
    try:
        # THEN both apps' profiles arrive at both backends under their services
        for service in ("sdbimage_plain", "sdbimage_boxed"):
            wait_for(lambda: walls(receiver, service) or agent.poll() is not None, 90, interval=0.5,
                     what=f"a profile of {service}")
            assert agent.poll() is None, err_path.read_text()
            wait_for(lambda: [a for a in resources(receiver) if a["service.name"] == service], 60,
                     interval=0.5, what=f"an OTLP profile of {service}")
        assert receiver.errors == []
        # AND the container's carry its container id and pod uid, the host's app none
        for labels, _ in walls(receiver, "sdbimage_boxed"):
            assert labels == {"service_name": "sdbimage_boxed", "__name__": "wall", "container_id": container_id,
                              "pod_uid": pod_uid}, labels
        for labels, _ in walls(receiver, "sdbimage_plain"):
            assert labels == {"service_name": "sdbimage_plain", "__name__": "wall"}, labels
        for a in resources(receiver):
            if a["service.name"] == "sdbimage_boxed":
                assert (a["container.id"], a["k8s.pod.uid"], a["process.pid"]) == (container_id, pod_uid, boxed), a
            else:
                assert (a["service.name"], a["process.pid"]) == ("sdbimage_plain", plain), a
                assert "container.id" not in a and "k8s.pod.uid" not in a, a
        # AND each sample carries its process's host pid, and its stack names the app's methods
        for service, pid in (("sdbimage_plain", plain), ("sdbimage_boxed", boxed)):
            samples = [s for _, raw in walls(receiver, service) for s in decoded(raw)["samples"]]
            assert {s["labels"]["pid"] for s in samples} == {str(pid)}, service
            assert any("Object#busy_loop" in s["frames"] for s in samples), (service, samples[:3])
    finally:
        # WHEN it is sent SIGTERM (as the kubelet stops a pod): unshare, its parent, ignores it
        os.killpg(agent.pid, signal.SIGTERM)
        code = agent.wait(90)
    text = err_path.read_text()
    # THEN it ends every recording and exits 0
    assert code == 0, text
    # (other Ruby programs of this machine may be counted as left out: --include is applied to a
    # registry the agent could open)
    assert re.search(r"^sdb: agent: stopped: 2 process trees recorded, \d+ left out, 0 failed$", text, re.M), text


def test_each_capability_the_manifest_adds_is_needed_to_read_an_app(rootfs, manifest, apps):
    # GIVEN an app of another user
    pid = apps.plain("nobody")
    caps = manifest["securityContext"]["capabilities"]["add"]

    def attach(with_caps):
        argv = in_image(rootfs, with_caps, [entrypoint()[0], "attach", "--pid", str(pid), "--no-ebpf",
                                            "--duration", "1", "-o", "/dev/shm/check.msgpack", "--quiet"])
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)

    # WHEN the image's sdb-sidecar records it with the manifest's capabilities: it can
    r = attach(caps)
    assert r.returncode == 0, r.stderr
    # AND with any one of them left out, it may not (one line, exit 9)
    for left_out in caps:
        r = attach([c for c in caps if c != left_out])
        assert r.returncode == Exit.PERMISSION, (left_out, r.returncode, r.stderr)
        # AND its one line names the capability to add
        assert r.stderr.startswith("sdb-sidecar: error: ") and r.stderr.count("\n") == 1, (left_out, r.stderr)
        assert f"CAP_{left_out}" in r.stderr, (left_out, r.stderr)
