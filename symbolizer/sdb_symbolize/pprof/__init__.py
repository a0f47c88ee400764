"""The pprof message classes (perftools.profiles.*), built at import from profile.proto beside
this file with the `protobuf` library: the .proto is read by a small parser of the plain proto3
subset it uses (top-level messages; scalar, message and repeated fields), turned into a
FileDescriptorProto and handed to a descriptor pool. No generated code exists anywhere.

    from sdb_symbolize.pprof import Profile
    p = Profile(); p.ParseFromString(gzip.decompress(data))
"""
from __future__ import annotations

import os
import re

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PROTO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profile.proto")

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"int64": _F.TYPE_INT64, "uint64": _F.TYPE_UINT64, "int32": _F.TYPE_INT32, "uint32": _F.TYPE_UINT32,
            "bool": _F.TYPE_BOOL, "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "double": _F.TYPE_DOUBLE,
            "float": _F.TYPE_FLOAT, "sint64": _F.TYPE_SINT64, "sint32": _F.TYPE_SINT32}
_TOKENS = re.compile(r'"[^"]*"|[A-Za-z_][A-Za-z0-9_.]*|\d+|[{};=]')


class ProtoSyntaxError(Exception):
    pass


def parse_proto(text: str, name: str = "profile.proto") -> descriptor_pb2.FileDescriptorProto:
    """A FileDescriptorProto for a proto3 file made of top-level messages with plain fields."""
    text = re.sub(r"//[^\n]*", "", text)
    toks = _TOKENS.findall(text)
    fdp = descriptor_pb2.FileDescriptorProto(name=name, syntax="proto3")
    messages = set(re.findall(r"\bmessage\s+([A-Za-z_][A-Za-z0-9_]*)", text))
    i = 0

    def expect(tok):
        nonlocal i
        if i >= len(toks) or toks[i] != tok:
            raise ProtoSyntaxError(f"{name}: expected {tok!r} at token {i} ({toks[i] if i < len(toks) else 'end'})")
        i += 1

    while i < len(toks):
        tok = toks[i]
        if tok == "syntax":
            i += 1
            expect("=")
            if toks[i] != '"proto3"':
                raise ProtoSyntaxError(f"{name}: only proto3 is supported")
            i += 1
            expect(";")
        elif tok == "package":
            fdp.package = toks[i + 1]
            i += 2
            expect(";")
        elif tok == "message":
            msg = fdp.message_type.add(name=toks[i + 1])
            i += 2
            expect("{")
            while toks[i] != "}":
                label = _F.LABEL_OPTIONAL
                if toks[i] == "repeated":
                    label = _F.LABEL_REPEATED
                    i += 1
                ftype, fname = toks[i], toks[i + 1]
                i += 2
                expect("=")
                number = int(toks[i])
                i += 1
                expect(";")
                field = msg.field.add(name=fname, number=number, label=label, json_name=_camel(fname))
                if ftype in _SCALARS:
                    field.type = _SCALARS[ftype]
                elif ftype in messages:
                    field.type = _F.TYPE_MESSAGE
                    field.type_name = f".{fdp.package}.{ftype}"
                else:
                    raise ProtoSyntaxError(f"{name}: unknown type {ftype} of field {msg.name}.{fname}")
            i += 1
        else:
            raise ProtoSyntaxError(f"{name}: unexpected {tok!r}")
    return fdp


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _load():
    with open(PROTO, encoding="utf-8") as f:
        fdp = parse_proto(f.read())
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fdp.package}.{m.name}"))
            for m in fdp.message_type}


_classes = _load()
Profile = _classes["Profile"]
ValueType = _classes["ValueType"]
Sample = _classes["Sample"]
Label = _classes["Label"]
Mapping = _classes["Mapping"]
Location = _classes["Location"]
Line = _classes["Line"]
Function = _classes["Function"]
