"""The service name of a process the agent records. `--service` names one app; the agent finds
many, so each gets the name it gives itself: what the gem publishes in its registry when it
publishes one (SDB_SERVICE_NAME, OTEL_SERVICE_NAME, read by the gem in its own process: the agent
never reads another process's environment), else the program its title names
(push.pusher.service_of: `ruby app.rb` -> app, `puma: cluster worker 0` -> puma)."""
from __future__ import annotations

from ..push.pusher import service_of as service_of_command
from ..target.target import Target


def service_of(process: Target) -> str:
    published = process.info.get("service")
    if isinstance(published, str) and published.strip():
        return published.strip()
    return service_of_command(process.command)
