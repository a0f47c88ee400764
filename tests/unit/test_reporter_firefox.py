"""firefox: the Firefox Profiler's processed format (version 47, upgraded by the viewer on load),
checked field by field against what the viewer requires of that version (its src/types/profile.js):
the meta block, one thread per track with every table, columns as long as `length`, every index
in range, categories valid and one per thread state."""
from __future__ import annotations

import json

import pytest

from format_recording import formats_trace, symbolize

pytestmark = pytest.mark.once

COLORS = {"transparent", "purple", "green", "orange", "yellow", "lightblue", "blue", "brown", "magenta", "red",
          "lightred", "darkgrey", "grey"}
META = {"interval": (int, float), "startTime": (int, float), "processType": int, "product": str, "stackwalk": int,
        "version": int, "preprocessedProfileVersion": int, "markerSchema": list, "categories": list}
THREAD = {"processType": str, "processStartupTime": (int, float), "registerTime": (int, float),
          "pausedRanges": list, "name": str, "isMainThread": bool, "pid": str, "tid": (int, str),
          "stringArray": list}
TABLES = {
    "samples": ["stack", "time"],
    "markers": ["data", "name", "startTime", "endTime", "phase", "category"],
    "stackTable": ["frame", "prefix", "category", "subcategory"],
    "frameTable": ["address", "inlineDepth", "category", "subcategory", "func", "nativeSymbol", "innerWindowID",
                   "implementation", "line", "column"],
    "funcTable": ["name", "isJS", "relevantForJS", "resource", "fileName", "lineNumber", "columnNumber"],
    "resourceTable": ["lib", "name", "host", "type"],
    "nativeSymbols": ["libIndex", "address", "name", "functionSize"],
}


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    path, trace = formats_trace(tmp_path_factory)
    return json.loads(symbolize(path, "firefox", "--idle").stdout), trace


def check_structure(p: dict) -> None:
    for key, typ in META.items():
        assert isinstance(p["meta"].get(key), typ), f"meta.{key}: {p['meta'].get(key)!r}"
    cats = p["meta"]["categories"]
    for c in cats:
        assert isinstance(c["name"], str) and c["color"] in COLORS and c["subcategories"], c
    assert any(c["color"] == "grey" for c in cats), "no default (grey) category"
    assert isinstance(p["libs"], list) and p["threads"]
    for th in p["threads"]:
        for key, typ in THREAD.items():
            assert isinstance(th.get(key), typ), f"thread {th.get('name')}: {key} = {th.get(key)!r}"
        assert "processShutdownTime" in th and "unregisterTime" in th
        for table, cols in TABLES.items():
            t = th[table]
            for col in cols:
                assert isinstance(t.get(col), list) and len(t[col]) == t["length"], f"{th['name']}.{table}.{col}"
        assert th["samples"]["weightType"] in ("samples", "tracing-ms", "bytes")
        assert th["samples"]["weight"] is None or len(th["samples"]["weight"]) == th["samples"]["length"]
        strings, stacks, frames, funcs = (th["stringArray"], th["stackTable"], th["frameTable"], th["funcTable"])
        for i, (prefix, frame, cat, sub) in enumerate(zip(stacks["prefix"], stacks["frame"], stacks["category"],
                                                          stacks["subcategory"])):
            assert prefix is None or 0 <= prefix < i, "a stack's prefix comes before it"
            assert 0 <= frame < frames["length"] and 0 <= cat < len(cats)
            assert 0 <= sub < len(cats[cat]["subcategories"])
        assert all(0 <= f < funcs["length"] for f in frames["func"])
        for c, sub in zip(frames["category"], frames["subcategory"]):
            assert c is None or (0 <= c < len(cats) and sub is not None and 0 <= sub < len(cats[c]["subcategories"]))
        assert all(0 <= n < len(strings) for n in funcs["name"])
        assert all(n is None or 0 <= n < len(strings) for n in funcs["fileName"])
        assert all(s is None or 0 <= s < stacks["length"] for s in th["samples"]["stack"])
        times = th["samples"]["time"]
        assert times == sorted(times), "samples in time order"


def test_the_processed_profile_has_every_field_the_viewer_requires(profile):
    check_structure(profile[0])


def test_one_track_per_thread_with_its_states_as_categories(profile):
    p, trace = profile
    cats = [c["name"] for c in p["meta"]["categories"]]
    tracks = {th["name"]: th for th in p["threads"]}
    assert len(tracks) == len(trace.threads)
    main = [th for th in p["threads"] if th["isMainThread"]]
    assert len(main) == 1 and "format_main" in main[0]["name"]

    def sample_categories(name):
        """Each sample's category both ways: the stack table's (version 47) and the one the
        current viewer derives from the frames (a frame without one inherits its caller's)."""
        th = next(t for n, t in tracks.items() if name in n)
        st, fr = th["stackTable"], th["frameTable"]
        derived = []
        for i in range(st["length"]):
            c = fr["category"][st["frame"][i]]
            if c is None:
                c = derived[st["prefix"][i]] if st["prefix"][i] is not None else 0
            derived.append(c)
        out = set()
        for s in th["samples"]["stack"]:
            if s is not None:
                assert derived[s] == st["category"][s]
                out.add(cats[derived[s]])
        return out

    # (a sleeper that wakes needs the GVL back: on a busy machine it waits for it, rightly shown)
    assert sample_categories("format_sleeper") <= {"Blocked", "Running", "Waiting for GVL"}
    assert "Blocked" in sample_categories("format_sleeper")
    assert "Running" in sample_categories("format_cruncher")


def test_frames_have_names_files_and_lines(profile):
    p, _ = profile
    th = next(t for t in p["threads"] if "format_cruncher" in t["name"])
    s = th["stringArray"]
    names = {s[n] for n in th["funcTable"]["name"]}
    assert any("format_crunch_step" in n for n in names), names
    f = next(i for i, n in enumerate(th["funcTable"]["name"]) if "format_crunch_step" in s[n])
    assert s[th["funcTable"]["fileName"][f]].endswith("formats.rb")
    lines = {ln for fn, ln in zip(th["frameTable"]["func"], th["frameTable"]["line"]) if fn == f}
    assert lines and all(isinstance(ln, int) and ln > 0 for ln in lines)

