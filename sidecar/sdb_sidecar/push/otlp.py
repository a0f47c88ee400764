"""OpenTelemetry's profiles over OTLP/HTTP: `POST /v1development/profiles`, an
ExportProfilesServiceRequest (binary protobuf) made by the profile library's "otlp" format (the
symbolizer's encoder, sdb_symbolize.reporters) of the interval's samples: the same names as every
other format; the body gzipped."""
from __future__ import annotations

import gzip
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
    # gzip, which OTLP/HTTP lets a client send with `Content-Encoding: gzip` (the Collector's receiver
    # takes it): ~3x fewer bytes; level 1, as each sample's 8-byte timestamp compresses about as well
    # at 1 as at 6 for a quarter of the CPU
    body = gzip.compress(interval.render("otlp", service=service), compresslevel=1, mtime=0)
    return [Payload(PATH, body, {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
                    samples=interval.samples)]
