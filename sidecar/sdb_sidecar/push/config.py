"""What `--push` asks for: destinations (KIND=URL), the interval, the service name, the CA file and
the credentials. Secrets come from the environment or a file, never from argv (argv is public in
`ps`). A bad value is one line and exit code 2 (Exit.USAGE), before anything is recorded."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple
from urllib.parse import urlsplit

from ..errors import Exit, SdbError

KINDS = ("pyroscope", "otlp")
DEFAULT_INTERVAL_S = 15.0
DEFAULT_QUEUE_BYTES = 64 << 20
DEFAULT_TIMEOUT_S = 10.0
# the environment variables (and the keys of an --push-auth-file) that carry credentials
TOKEN_ENV, BASIC_ENV, TENANT_ENV = "SDB_PUSH_TOKEN", "SDB_PUSH_BASIC_AUTH", "SDB_PUSH_TENANT"


@dataclass(frozen=True)
class Destination:
    kind: str           # pyroscope | otlp
    url: str            # scheme://host[:port][/prefix], no trailing slash


@dataclass(frozen=True)
class PushConfig:
    destinations: Tuple[Destination, ...]
    interval_s: float = DEFAULT_INTERVAL_S
    service: Optional[str] = None          # None: the process's title (service_name)
    ca_file: Optional[str] = None          # None: the system's CAs
    queue_bytes: int = DEFAULT_QUEUE_BYTES
    headers: Dict[str, str] = field(default_factory=dict)   # Authorization, X-Scope-OrgID
    ingest: bool = False                   # pyroscope: the older /ingest endpoint, not Connect Push
    timeout_s: float = DEFAULT_TIMEOUT_S   # a request's answer waited for at most this long


def destination(text: str) -> Destination:
    """One --push value, `KIND=URL` (SdbError(Exit.USAGE) if it is not one)."""
    kind, eq, url = text.partition("=")
    kind = kind.strip().lower()
    if not eq or kind not in KINDS:
        raise SdbError(f"--push {text!r}: say KIND=URL, KIND one of {', '.join(KINDS)} "
                                         f"(e.g. pyroscope=http://pyroscope:4040)", Exit.USAGE)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise SdbError(f"--push {text!r}: the URL must start with http:// or https://", Exit.USAGE)
    if not parts.hostname:
        raise SdbError(f"--push {text!r}: the URL has no host", Exit.USAGE)
    if parts.query or parts.fragment:
        raise SdbError(f"--push {text!r}: the URL must have no ?query or #fragment", Exit.USAGE)
    try:
        parts.port
    except ValueError:
        raise SdbError(f"--push {text!r}: the URL's port is not a number from 1 to 65535", Exit.USAGE) from None
    return Destination(kind, url.rstrip("/"))


def _read_auth_file(path: str) -> Dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise SdbError(f"--push-auth-file {path}: {e.strerror}", Exit.USAGE) from None
    except UnicodeDecodeError:
        raise SdbError(f"--push-auth-file {path}: not UTF-8 text", Exit.USAGE) from None
    found: Dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        key = key.strip()
        if not eq or key not in (TOKEN_ENV, BASIC_ENV, TENANT_ENV):
            raise SdbError(f"--push-auth-file {path} line {n}: say {TOKEN_ENV}=..., {BASIC_ENV}=USER:PASSWORD "
                           f"or {TENANT_ENV}=...", Exit.USAGE)
        found[key] = value.strip()
    return found


def auth_headers(env: Dict[str, str], tenant: Optional[str]) -> Dict[str, str]:
    """The request headers the credentials make (a header value cannot hold a line break)."""
    import base64
    headers: Dict[str, str] = {}
    token, basic = env.get(TOKEN_ENV), env.get(BASIC_ENV)
    if token and basic:
        raise SdbError(f"both {TOKEN_ENV} and {BASIC_ENV} are set: keep one", Exit.USAGE)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif basic:
        if ":" not in basic:
            raise SdbError(f"{BASIC_ENV} must be USER:PASSWORD", Exit.USAGE)
        headers["Authorization"] = "Basic " + base64.b64encode(basic.encode("utf-8")).decode("ascii")
    tenant = tenant or env.get(TENANT_ENV)
    if tenant:
        headers["X-Scope-OrgID"] = tenant
    for k, v in headers.items():
        if any(c in v for c in "\r\n\0"):
            raise SdbError(f"the {k} credential holds a line break", Exit.USAGE)
    return headers


def push_config(args) -> Optional[PushConfig]:
    """The PushConfig of parsed attach/record arguments (None without --push). SdbError(Exit.USAGE)
    for a bad value."""
    if not args.push:
        return None
    destinations = tuple(destination(text) for text in args.push)
    if args.push_interval < 1:
        raise SdbError(f"--push-interval {args.push_interval:g}: at least 1 second", Exit.USAGE)
    if args.push_ca is not None and not os.access(args.push_ca, os.R_OK):
        raise SdbError(f"--push-ca {args.push_ca}: cannot read it", Exit.USAGE)
    service = getattr(args, "service", None)
    if service is not None and not service.strip():
        raise SdbError("--service: empty name", Exit.USAGE)
    if any(d.kind == "otlp" for d in destinations):
        from .otlp import available
        if not available():
            raise SdbError("--push otlp=...: this sdb's symbolizer has no otlp format", Exit.USAGE)
    env = _read_auth_file(args.push_auth_file) if args.push_auth_file else dict(os.environ)
    return PushConfig(destinations=destinations, interval_s=args.push_interval, service=service,
                      ca_file=args.push_ca, queue_bytes=int(args.push_queue * (1 << 20)),
                      headers=auth_headers(env, args.push_tenant), ingest=args.push_ingest,
                      timeout_s=args.push_timeout)
