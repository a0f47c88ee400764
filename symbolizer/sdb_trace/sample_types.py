"""Sample types (format 4): what a recording's samples measure, declared once in its header.

A written type's samples are in the samples records whose `type` names it; a derived type's are
the samples of the written type `of` whose thread state is one of `states` (no bytes per sample:
`cpu` is `wall`'s samples of running threads). A type with a fixed `value` is sampled time: each
of its samples weighs `value` (the period) unless its batch carries a `value` column; a type
without one is measured (allocations: objects, bytes): every batch of it carries the column."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from .registry_h import SDB_STATE_RUNNING

WALL, CPU = "wall", "cpu"
NANOSECONDS = "nanoseconds"


@dataclass(frozen=True)
class SampleType:
    index: int
    name: str                           # "wall", "cpu", "alloc_space", ...
    unit: str                           # "nanoseconds", "count", "bytes"
    value: Optional[int] = None         # what a sample weighs without a value column (None: measured)
    of: Optional[int] = None            # derived: the written type whose samples these are
    states: Optional[Tuple[int, ...]] = None   # ... those in these thread states

    @property
    def sampled(self) -> bool:
        """Each sample is one period of this (time sampling): outputs that count, count samples."""
        return self.value is not None


def period_of(header: dict) -> int:
    """The tick period in ns of a recording's header (1 kHz when it says none)."""
    return int(round(1e9 / (header.get("rate_hz") or 1000)))


def time_sample_types(rate_hz) -> List[dict]:
    """The header's `sample_types` of a time recording (the sidecar's): wall time of every thread,
    and cpu, the samples of running threads (holding the GVL: Ruby >= 3.2's gem states; on a CPU:
    Ruby 3.1's kernel or /proc states), each one tick period a sample."""
    period = period_of({"rate_hz": rate_hz})
    return [{"name": WALL, "unit": NANOSECONDS, "value": period},
            {"name": CPU, "unit": NANOSECONDS, "of": 0, "states": [SDB_STATE_RUNNING]}]


def check_sample_types(v) -> Optional[str]:
    """None if `v` is a valid header `sample_types`; else what is wrong (no value quoted)."""
    if type(v) is not list or not v or len(v) > 64:
        return "'sample_types' is not a list of 1 to 64 maps"
    names = set()
    for i, t in enumerate(v):
        if type(t) is not dict or type(t.get("name")) is not str or type(t.get("unit")) is not str:
            return f"sample type {i} has no string 'name' and 'unit'"
        if t["name"] in names:
            return f"sample type {i} repeats a name"
        names.add(t["name"])
        value, of, states = t.get("value"), t.get("of"), t.get("states")
        if value is not None and not (type(value) is int and 0 < value < 1 << 63):
            return f"sample type {i}'s 'value' is not a positive integer"
        if of is None:
            if states is not None:
                return f"sample type {i} has 'states' without 'of'"
            continue
        if type(of) is not int or not 0 <= of < i or v[of].get("of") is not None:
            return f"sample type {i}'s 'of' is not an earlier written type"
        if type(states) is not list or not states or not all(type(s) is int and 0 <= s < 256 for s in states):
            return f"sample type {i}'s 'states' is not a list of thread states"
        if value is not None or t["unit"] != v[of].get("unit"):
            return f"sample type {i} (derived) has a 'value' or a unit other than its type's"
    if v[0].get("of") is not None:
        return "sample type 0 is derived"
    return None


def sample_types_of(header: dict) -> List[SampleType]:
    """The sample types of a (checked) header: its `sample_types` from format 4 on; before, and in a
    format-4 header without them, one: wall, each sample one tick period."""
    declared = header.get("sample_types") if (header.get("version") or 0) >= 4 else None
    if not declared:
        return [SampleType(0, WALL, NANOSECONDS, period_of(header))]
    out: List[SampleType] = []
    for i, t in enumerate(declared):
        of = t.get("of")
        if of is None:
            out.append(SampleType(i, t["name"], t["unit"], t.get("value")))
        else:
            out.append(SampleType(i, t["name"], t["unit"], out[of].value, of, tuple(t["states"])))
    return out
