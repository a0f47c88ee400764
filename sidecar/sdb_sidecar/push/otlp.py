"""OpenTelemetry's profiles over OTLP/HTTP: `POST /v1development/profiles`, an
ExportProfilesServiceRequest (binary protobuf) made by the profile library's "otlp" format (the
symbolizer's encoder, sdb_symbolize.reporters) of the interval's samples: the same names as every
other format."""
from __future__ import annotations

from typing import List

from .cutter import Interval
from .queue import Payload

PATH = "/v1development/profiles"


def available() -> bool:
    """This sdb's symbolizer has the otlp format."""
    try:
        from sdb_symbolize.reporters import REPORTERS
    except Exception:
        return False
    return "otlp" in REPORTERS


def encode(interval: Interval, service: str, ingest: bool = False) -> List[Payload]:
    body = interval.render("otlp", service=service)
    return [Payload(PATH, body, {"Content-Type": "application/x-protobuf"}, samples=interval.samples)]
