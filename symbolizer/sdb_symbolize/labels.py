"""The label rules: what a frame is called, given its `iseq` and `method` records. The one place
that decides a label; every tool reaches it through resolve.Resolver (sdb-symbolize, and the sidecar's
snapshot and top), so a frame has one name whichever tool shows it."""
from __future__ import annotations

from typing import Optional

from sdb_trace import (ISEQ_TYPE_BLOCK, ISEQ_TYPE_ENSURE, ISEQ_TYPE_METHOD, ISEQ_TYPE_RESCUE, KIND_CFUNC, KIND_GC,
                       METHOD_ISEQ)

GC_LABEL = "(garbage collection)"
TRUNCATED_LABEL = "(truncated)"


def qualified_name(method: Optional[dict]) -> Optional[str]:
    """rb_profile_frame_qualified_method_name: `Foo::Bar#baz`, `Foo.baz` (singleton), or the bare
    name when the class is unknown."""
    if not method or not method.get("name"):
        return None
    if method.get("class_path"):
        return method["class_path"] + ("." if method.get("singleton") else "#") + method["name"]
    return method["name"]


_PREFIXED = (ISEQ_TYPE_BLOCK, ISEQ_TYPE_RESCUE, ISEQ_TYPE_ENSURE)   # `block in`, `rescue in`, `ensure in`


LABELS_SDB = "sdb"
LABELS_RUBY = "ruby-profile-frames"
LABEL_CONVENTIONS = (LABELS_SDB, LABELS_RUBY)


def full_label(kind: int, iseq: Optional[dict], method: Optional[dict], labels: str = LABELS_SDB) -> str:
    """A frame's label as rb_profile_frame_full_label gives it (docs/trace-format.md, "Labels").
    iseq: the frame's `iseq` record (label, base_label); method: the frame's `method` record.
    - C function: its qualified name (`Integer#times`, `IO.select`).
    - Ruby frame of a method defined with `def` (method type 0): the qualified name (`Foo#bar`;
      an `eval` inside the method too); a block, rescue or ensure ISeq keeps its label's prefix
      (`block in Foo#bar`, `block (2 levels) in Foo.bar`, `rescue in Foo#bar`).
    - any other Ruby frame (top level, class bodies, define_method, no method): the ISeq's label
      (`<main>`, `<class:Foo>`, `block (2 levels) in <main>`, `<top (required)>`).
    labels=LABELS_RUBY: exactly rb_profile_frame_full_label's string, which for a block, rescue or
    ensure frame of a method is the method's qualified name alone (`Foo#bar`: rb_profile_frames hands
    such a frame its method's entry), as stackprof and OpenTelemetry profiles show it."""
    if kind == KIND_CFUNC:
        # a `def` method's entry in a C function's frame is another frame's (Ruby pushes a C frame
        # only with its C method's entry): unnamed, never that method's name
        if method and method.get("type") == METHOD_ISEQ:
            return "(C function)"
        return qualified_name(method) or "(C function)"
    if kind == KIND_GC:
        return GC_LABEL
    label = (iseq or {}).get("label") or ""
    base = (iseq or {}).get("base_label") or ""
    if method_fits(iseq, method):
        qualified = qualified_name(method)
        if labels == LABELS_SDB and (iseq or {}).get("type") in _PREFIXED and base and label.endswith(base):
            return label[:len(label) - len(base)] + qualified
        return qualified
    return label



def method_fits(iseq: Optional[dict], method: Optional[dict]) -> bool:
    """Whether full_label names a Ruby frame of this ISeq after this method entry: a `def` method with
    a class, and one that can be this frame's. A method's ISeq, and its blocks, rescues and ensures,
    carry the method's original name as base label, which is the entry's name (its original_id): a
    frame read while the stack moved can pair an ISeq with another frame's entry, and such a pair
    must not lend the ISeq another method's name. Other ISeqs (an eval inside a method) cannot be
    checked this way and keep the entry."""
    if not (method and method.get("type") == METHOD_ISEQ and method.get("class_path") and method.get("name")):
        return False
    return not names_its_method(iseq) or ((iseq or {}).get("base_label") or "") == method["name"]


def names_its_method(iseq: Optional[dict]) -> bool:
    """A method's ISeq, or one of its blocks, rescues or ensures: an ISeq whose frames a method entry
    can be checked against (by name) and so be borrowed for (resolve.Resolver.agreed_method)."""
    return bool(iseq) and (iseq.get("type") == ISEQ_TYPE_METHOD or iseq.get("type") in _PREFIXED)
