"""deploy/sdb-agent.yaml, the agent's DaemonSet, asks for what the agent needs and no more: its
arguments are parsed by the agent's own command line (an option renamed fails here), its
capabilities follow from what the agent does (the remote reads; eBPF only if the agent uses it),
it sees the node's processes (hostPID) and mounts nothing of the node's it does not read.
`scripts/image-rootfs check` runs the image's root filesystem with this file's arguments,
capabilities and read-only root (tests/integration/image_check.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml     # Debian's python3-yaml, which the virtualenv reaches as it reaches bcc (Makefile)

from sdb_sidecar.cli import build_parser
from sdb_sidecar.push.config import BASIC_ENV, TENANT_ENV, TOKEN_ENV, push_config

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "sdb-agent.yaml"
# the image's ENTRYPOINT after its program (tests/unit/test_deploy_image.py checks the Dockerfile's)
ENTRYPOINT_ARGS = ["agent"]
# what every recording of the agent needs: process_vm_readv, /proc/PID/maps and /proc/PID/root of
# other users' processes (CAP_SYS_PTRACE); the apps' 0600 registries, opened read-only (CAP_DAC_READ_SEARCH)
READS = {"SYS_PTRACE", "DAC_READ_SEARCH"}
# what eBPF adds (bcc's programs and uprobes), and where its probes are made (tracefs)
EBPF = {"BPF", "PERFMON"}
TRACEFS = {"/sys/kernel/debug", "/sys/kernel/tracing"}

pytestmark = pytest.mark.once


class StrictLoader(yaml.SafeLoader):
    """YAML as Kubernetes reads it, and a key given twice refused (PyYAML keeps the last silently;
    kubectl rejects it)."""


def _mapping(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    twice = {k for k in keys if keys.count(k) > 1}
    if twice:
        raise yaml.constructor.ConstructorError(None, None, f"keys given twice: {sorted(twice)}", node.start_mark)
    return loader.construct_mapping(node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def daemonset() -> dict:
    docs = [d for d in yaml.load_all(MANIFEST.read_text(), Loader=StrictLoader) if d is not None]
    assert len(docs) == 1, f"{MANIFEST}: one DaemonSet expected, {len(docs)} documents"
    return docs[0]


def agent_container(ds: dict) -> dict:
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return c


def parsed_args(ds: dict) -> argparse.Namespace:
    return build_parser().parse_args(ENTRYPOINT_ARGS + agent_container(ds)["args"])


def agent_options(args: argparse.Namespace, monkeypatch):
    """What the agent's command would record with: the Options it hands the Agent (the Agent itself
    not run)."""
    seen = {}

    class Captured:
        def __init__(self, opts, *a, **kw):
            seen["opts"] = opts

        def run(self):
            return 0

    monkeypatch.setitem(args.run.__globals__, "Agent", Captured)
    assert args.run(args) == 0
    return seen["opts"]


def test_the_manifest_is_one_valid_daemonset_whose_selector_picks_its_pods():
    ds = daemonset()
    assert (ds["apiVersion"], ds["kind"]) == ("apps/v1", "DaemonSet")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_a_key_given_twice_is_refused():
    with pytest.raises(yaml.constructor.ConstructorError, match="twice"):
        yaml.load("a: 1\na: 2\n", Loader=StrictLoader)


def test_its_arguments_are_the_agents_and_push_somewhere(monkeypatch):
    for name in (TOKEN_ENV, BASIC_ENV, TENANT_ENV):
        monkeypatch.delenv(name, raising=False)
    ds = daemonset()
    args = parsed_args(ds)          # argparse exits (2) on an option the agent does not have
    assert args.command == "agent"
    push = push_config(args)
    assert push is not None and {d.kind for d in push.destinations} == {"pyroscope", "otlp"}
    opts = agent_options(args, monkeypatch)
    assert opts.push is not None
    # SIGTERM pushes every recording's last interval: the pod is given the time one push may take
    assert ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > push.timeout_s


def test_credentials_come_from_the_environment_variables_the_agent_reads():
    c = agent_container(daemonset())
    names = {e["name"] for e in c.get("env", [])}
    assert names and names <= {TOKEN_ENV, BASIC_ENV, TENANT_ENV}, names


def test_it_sees_every_process_of_the_node_and_mounts_nothing_it_does_not_read(monkeypatch):
    ds = daemonset()
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True          # /proc is the node's: every pod's process by its host pid
    assert not spec.get("hostNetwork") and not spec.get("hostIPC")
    host_paths = {v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
    opts = agent_options(parsed_args(ds), monkeypatch)
    # each pod's /dev/shm is reached through /proc/PID/root (agent/discovery.py): no hostPath for it;
    # tracefs only for eBPF's probes
    assert host_paths == (TRACEFS & host_paths if opts.ebpf else set()), host_paths
    if opts.ebpf:
        assert host_paths, "eBPF's uprobes need tracefs: mount /sys/kernel/debug or /sys/kernel/tracing"


def test_its_capabilities_are_the_ones_the_agent_needs_and_no_more(monkeypatch):
    ds = daemonset()
    sc = agent_container(ds)["securityContext"]
    opts = agent_options(parsed_args(ds), monkeypatch)
    needed = READS | (EBPF if opts.ebpf else set())
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(sc["capabilities"]["add"]) == needed
    assert not sc.get("privileged")
    assert sc["allowPrivilegeEscalation"] is False
    # capabilities reach a container's process only as root (Kubernetes sets no ambient ones)
    assert sc["runAsUser"] == 0
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # the runtimes' default AppArmor profiles allow ptrace reads of the same profile's processes only
    assert sc["appArmorProfile"] == {"type": "Unconfined"}
