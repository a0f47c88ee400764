"""Writes a fixed AsciiDoc book (the real-program check's document for asciidoctor): chapters of
sections with paragraphs full of inline markup, lists, tables, source blocks, admonitions and
cross references, the same bytes on every machine. python3 asciidoc_book.py OUT [CHAPTERS]"""
import sys

WORDS = ("profile sample thread stack frame method class module block fiber ractor mutex queue "
         "socket request response template view controller model record query index cache").split()


def para(n: int) -> str:
    out = []
    for i in range(40):
        w = WORDS[(n * 7 + i * 3) % len(WORDS)]
        if i % 9 == 0:
            w = f"*{w}*"
        elif i % 11 == 0:
            w = f"_{w}_"
        elif i % 13 == 0:
            w = f"`{w}_{n}`"
        elif i % 17 == 0:
            w = f"<<sec-{n % 50}-1,{w}>>"
        elif i % 19 == 0:
            w = f"https://example.org/{w}/{n}[{w}]"
        out.append(w)
    return " ".join(out) + "."


def main() -> None:
    out, chapters = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 60
    lines = ["= The Book of Samples", ":toc:", ":sectnums:", ":source-highlighter!:", ""]
    n = 0
    for c in range(chapters):
        lines += [f"== Chapter {c}", ""]
        for s in range(6):
            n += 1
            lines += [f"[[sec-{c}-{s}]]", f"=== Section {c}.{s}", "", para(n), "", para(n + 1), ""]
            lines += [f"* {WORDS[(n + k) % len(WORDS)]} item with `code` and *bold* {k}" for k in range(6)] + [""]
            lines += [f". step {k}: {para(n + k)[:80]}" for k in range(4)] + [""]
            lines += ['[cols="1,2,1",options="header"]', "|===", "|name |what |count"]
            lines += [f"|{WORDS[(n + k) % len(WORDS)]} |{para(n + k)[:60]} |{k * n}" for k in range(8)]
            lines += ["|===", "", "[source,ruby]", "----"]
            lines += [f"def m{n}_{k}(x) = x * {k} # {WORDS[k % len(WORDS)]}" for k in range(6)]
            lines += ["----", "", f"NOTE: {para(n + 2)}", "", f"TIP: see <<sec-{c}-{(s + 1) % 6}>>.", ""]
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
