"""One HTTP(S) POST of a payload, and what its answer means for it: sent, worth trying again (later:
the backend is down, overloaded or slow), or not (the same bytes would fail the same way). Each
outcome has one line for the user, without a traceback. Timeouts on the connect and on the answer;
TLS with the system's CAs or --push-ca."""
from __future__ import annotations

import email.utils
import http.client
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from sdb_trace.output import printable

from .queue import Payload

CONNECT_TIMEOUT_S = 5.0
SENT, RETRY, DROP = "sent", "retry", "drop"


@dataclass
class Outcome:
    verdict: str                     # SENT, RETRY or DROP
    kind: str = ""                   # what went wrong, in one word (the notices say each kind once)
    message: str = ""                # one line for the user
    retry_after_s: Optional[float] = None   # 429/503's Retry-After


def retry_after(value: Optional[str]) -> Optional[float]:
    """Retry-After: seconds, or an HTTP date (RFC 9110 10.2.3); None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Transport:
    """POSTs to one destination URL (scheme://host:port/prefix)."""

    def __init__(self, url: str, ca_file: Optional[str], answer_timeout_s: float, headers: dict):
        parts = urlsplit(url)
        self.url = url
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.answer_timeout_s = answer_timeout_s
        self.headers = dict(headers)
        self.context = None
        if self.https:
            self.context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()

    def post(self, p: Payload, user_agent: str) -> Outcome:
        where = f"{self.url}{p.path.split('?')[0]}"
        try:
            if self.https:
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=CONNECT_TIMEOUT_S,
                                                   context=self.context)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=CONNECT_TIMEOUT_S)
            try:
                conn.connect()
                conn.sock.settimeout(self.answer_timeout_s)
                headers = {"User-Agent": user_agent, "Content-Length": str(len(p.body)), **self.headers, **p.headers}
                conn.request("POST", self.prefix + p.path, body=p.body, headers=headers)
                r = conn.getresponse()
                answer = r.read(4096)
                return self._answer(r.status, r.reason, r.getheader("Retry-After"), answer, where)
            finally:
                conn.close()
        except ssl.SSLCertVerificationError as e:
            return Outcome(DROP, "tls", f"TLS: {where}: the server's certificate is not trusted "
                                        f"({printable(e.verify_message or str(e))}); give its CA with --push-ca")
        except ssl.SSLError as e:
            return Outcome(DROP, "tls", f"TLS: {where}: {printable(e.reason or str(e))} (is it https?)")
        except socket.timeout:
            return Outcome(RETRY, "timeout", f"{where}: no answer within the timeout (connect "
                                             f"{CONNECT_TIMEOUT_S:g} s, answer {self.answer_timeout_s:g} s)")
        except socket.gaierror as e:
            return Outcome(RETRY, "dns", f"{where}: cannot resolve {self.host}: {printable(e.strerror or str(e))}")
        except ConnectionRefusedError:
            return Outcome(RETRY, "refused", f"{where}: connection refused (is the backend up?)")
        except (http.client.BadStatusLine, http.client.LineTooLong) as e:
            return Outcome(DROP, "protocol", f"{where}: not an HTTP answer ({type(e).__name__}); "
                                             f"is the URL's scheme right (http/https)?")
        except (http.client.HTTPException, OSError) as e:
            what = getattr(e, "strerror", None) or str(e) or type(e).__name__
            return Outcome(RETRY, "network", f"{where}: {printable(what)}")

    @staticmethod
    def _answer(status: int, reason: str, after: Optional[str], answer: bytes, where: str) -> Outcome:
        if 200 <= status < 300:
            return Outcome(SENT)
        said = printable(answer.decode("utf-8", "replace").strip().splitlines()[0][:200]) if answer.strip() else ""
        text = f"{where}: HTTP {status} {printable(reason)}" + (f": {said}" if said else "")
        if status == 429 or status == 503:
            return Outcome(RETRY, str(status), text + " (the backend asks to slow down; retrying later)",
                           retry_after(after))
        if status in (401, 403):
            return Outcome(DROP, str(status), text + " (check $SDB_PUSH_TOKEN / $SDB_PUSH_BASIC_AUTH / "
                                                     "--push-auth-file and --push-tenant)")
        if status == 413:
            return Outcome(DROP, "413", text + " (the profile is larger than the backend takes: dropped; "
                                               "a shorter --push-interval makes smaller ones)")
        if status in (404, 405):
            return Outcome(DROP, str(status), text + " (is the URL the backend's base URL?)")
        if status in (408, 500, 502, 504):
            return Outcome(RETRY, str(status), text + " (retrying)")
        return Outcome(DROP, str(status), text)
