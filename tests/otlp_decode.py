"""Reading sdb's OTLP profiles back with the official generated classes of the `opentelemetry-proto`
PyPI package (1.45.2: opentelemetry-proto v1.10.0), an independent decoder of what
sdb_symbolize/reporters/otlp.py encodes by hand, and checking the dictionary's rules as the .proto
states them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2


def decode(data: bytes) -> profiles_service_pb2.ExportProfilesServiceRequest:
    req = profiles_service_pb2.ExportProfilesServiceRequest()
    req.ParseFromString(data)
    return req


def any_value(v):
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


def frame_name(label: str, path: str, line: int) -> str:
    """A frame's name as sdb-symbolize's text formats write it: `label (path:line)`."""
    if not path:
        return label
    return f"{label} ({path}:{line})" if line else f"{label} ({path})"


@dataclass
class Sample:
    pid: int                    # the resource's process.pid
    type: str                   # its profile's sample type
    frames: Tuple[str, ...]     # root first, as the text formats show them
    labels: Tuple[str, ...]     # the functions' names only, root first
    attributes: Dict[str, object]
    timestamps: List[int]
    values: List[int]
    link: Optional[Tuple[str, str]] = None     # its Link's (trace id, span id) in hex; None: link_index 0


def resource_attributes(rp) -> Dict[str, object]:
    return {kv.key: any_value(kv.value) for kv in rp.resource.attributes}


def samples(req) -> List[Sample]:
    """Every Sample of every profile of the request, with its frames and attributes resolved."""
    d = req.dictionary
    st = d.string_table

    def attrs(indices):
        return {st[d.attribute_table[i].key_strindex]: any_value(d.attribute_table[i].value) for i in indices}

    out = []
    for rp in req.resource_profiles:
        pid = resource_attributes(rp).get("process.pid")
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                typ = st[p.sample_type.type_strindex]
                for s in p.samples:
                    names, labels = [], []
                    for li in d.stack_table[s.stack_index].location_indices:     # leaf first
                        loc = d.location_table[li]
                        assert len(loc.lines) == 1
                        fn = d.function_table[loc.lines[0].function_index]
                        names.append(frame_name(st[fn.name_strindex], st[fn.filename_strindex], loc.lines[0].line))
                        labels.append(st[fn.name_strindex])
                    link = d.link_table[s.link_index] if s.link_index else None
                    out.append(Sample(pid, typ, tuple(reversed(names)), tuple(reversed(labels)),
                                      attrs(s.attribute_indices), list(s.timestamps_unix_nano), list(s.values),
                                      (link.trace_id.hex(), link.span_id.hex()) if link is not None else None))
    return out


_TABLES = (("mapping_table", profiles_pb2.Mapping), ("location_table", profiles_pb2.Location),
           ("function_table", profiles_pb2.Function), ("link_table", profiles_pb2.Link),
           ("attribute_table", profiles_pb2.KeyValueAndUnit), ("stack_table", profiles_pb2.Stack))


def check_dictionary(req) -> None:
    """The ProfilesDictionary's rules (profiles.proto v1.10.0): every table present with its zero
    value at index 0 (string_table[0] == ""), no entry twice, every index in range, and each
    profile's and sample's references resolving."""
    d = req.dictionary
    assert len(d.string_table) and d.string_table[0] == ""
    assert len(set(d.string_table)) == len(d.string_table)
    for name, cls in _TABLES:
        table = getattr(d, name)
        assert len(table) >= 1 and table[0] == cls(), f"{name}[0] is not the zero value"
        encoded = [e.SerializeToString(deterministic=True) for e in table]
        assert len(set(encoded)) == len(encoded), f"{name} repeats an entry"
        for e in list(table)[1:]:
            assert e != cls(), f"{name} holds the zero value past index 0"
    ns = len(d.string_table)
    for m in d.mapping_table:
        assert m.filename_strindex < ns and all(i < len(d.attribute_table) for i in m.attribute_indices)
    for loc in d.location_table:
        assert loc.mapping_index < len(d.mapping_table)
        assert all(i < len(d.attribute_table) for i in loc.attribute_indices)
        assert all(ln.function_index < len(d.function_table) for ln in loc.lines)
    for fn in d.function_table:
        assert max(fn.name_strindex, fn.system_name_strindex, fn.filename_strindex) < ns
    for a in d.attribute_table:
        assert a.key_strindex < ns and a.unit_strindex < ns
    for s in d.stack_table:
        assert all(0 < i < len(d.location_table) for i in s.location_indices)
    for link in list(d.link_table)[1:]:
        assert len(link.trace_id) == 16 and any(link.trace_id) and len(link.span_id) == 8 and any(link.span_id)
    for rp in req.resource_profiles:
        keys = [kv.key for kv in rp.resource.attributes]
        assert len(keys) == len(set(keys))
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                assert 0 < p.sample_type.type_strindex < ns and 0 < p.period_type.type_strindex < ns
                assert len(p.profile_id) == 16 and any(p.profile_id)
                for s in p.samples:
                    assert s.stack_index < len(d.stack_table) and s.link_index < len(d.link_table)
                    keys = [d.attribute_table[i].key_strindex for i in s.attribute_indices]
                    assert len(keys) == len(set(keys)), "a sample's attributes repeat a key"
                    assert len(s.values) == len(s.timestamps_unix_nano) > 0
                    assert list(s.timestamps_unix_nano) == sorted(s.timestamps_unix_nano)
                    for t in s.timestamps_unix_nano:
                        assert p.time_unix_nano <= t < p.time_unix_nano + p.duration_nano
