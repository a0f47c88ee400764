"""What the per-request tests share: real servers (puma, Sidekiq, redis-server) on free ports with
Debian's gems, and a sidecar attached to one of them from its first samples until told to stop."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, Optional

from conftest import REPO, SDB_RUBY, SIDECAR, ruby_env, samples_so_far, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def debian_gems_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The targets' environment (the sdb gem's GEM_HOME) with Debian's own gem directories after it
    (puma, rack, Rails, Sidekiq)."""
    env = ruby_env(extra=extra)
    debian = subprocess.run([SDB_RUBY, "-e", "print Gem.default_path.join(':')"], capture_output=True, text=True,
                            env=ruby_env(with_gem=False)).stdout
    env["GEM_PATH"] = f"{env.get('GEM_PATH', '')}:{debian}"
    return env


RAILS_APP = REPO / "benchmarks" / "rails_app"


def rails_up(port: int, server: subprocess.Popen) -> bool:
    """The bundled Rails app answers its /up (True as well once the server ended: stop waiting, the
    caller's assert says so)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/up", timeout=2) as r:
            return r.status == 200
    except OSError:
        return server.poll() is not None


def start_rails_app(tmp: Path, env: Dict[str, str]) -> subprocess.Popen:
    """puma with the bundled Rails app (benchmarks/rails_app) in env (its PORT...), its output in
    tmp/puma.log; returned once the app answers. The caller stops it (stop)."""
    with open(tmp / "puma.log", "w") as log:
        server = subprocess.Popen([SDB_RUBY, "-S", "puma", "-C", str(RAILS_APP / "config" / "puma.rb")],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                  cwd=str(RAILS_APP))
    try:
        wait_for(lambda: rails_up(int(env["PORT"]), server), 120, what="the Rails app up")
        assert server.poll() is None, (tmp / "puma.log").read_text()[-2000:]
    except BaseException:
        stop(server)
        raise
    return server


def stop(p: subprocess.Popen) -> None:
    """Ends a server (SIGTERM, then SIGKILL) and removes the registry it may leave."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"/dev/shm/sdb-{p.pid}")


@contextlib.contextmanager
def recording(pid: int, trace: Path) -> Iterator[None]:
    """`sdb-sidecar attach` to pid, from its first samples (the body runs then) until the body is
    done: SIGINT, and the sidecar must end cleanly."""
    sidecar = subprocess.Popen([*SIDECAR, "attach", "--pid", str(pid), "-o", str(trace), "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        wait_for(lambda: trace.exists() and samples_so_far(trace) > 0, 60, what="first samples")
        yield
        sidecar.send_signal(signal.SIGINT)
        _, err = sidecar.communicate(timeout=120)
        assert sidecar.returncode == 0, err
    finally:
        if sidecar.poll() is None:
            sidecar.kill()
            sidecar.communicate(timeout=10)
