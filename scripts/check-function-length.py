#!/usr/bin/env python3
"""Lists functions longer than a limit (default 80 lines, body braces included) in C++ sources.

  scripts/check-function-length.py [--max N] DIR_OR_FILE...

Exits 1 when one is over. A function is a brace block opened at namespace or class scope after a
parameter list; lambdas and nested blocks count toward the function around them."""
import argparse
import os
import re
import sys

EXTS = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh")


def strip(src):
    """Comments, string and char literals blanked (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"' and re.search(r'R$', src[max(0, i - 1):i]) and src[i + 1:].find("(") >= 0:
            d = src[i + 1:src.index("(", i + 1)]
            end = src.find(")" + d + '"', i)
            end = n if end < 0 else end + len(d) + 2
            out.append(re.sub(r"[^\n]", " ", src[i:end]))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, line count) of each top-level function body."""
    stack, last, res = [], 0, []  # stack of (kind, start offset)
    for m in re.finditer(r"[{};]", text):
        ch, pos = m.group(), m.start()
        if ch == ";":
            last = pos + 1
            continue
        if ch == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "function":
                    first = text.count("\n", 0, start) + 1
                    res.append((name, first, text.count("\n", start, pos) + 1))
            last = pos + 1
            continue
        head = text[last:pos]
        last = pos + 1
        outer = stack[-1][0] if stack else "namespace"
        if outer not in ("namespace", "class"):
            stack.append(("block", pos, ""))
            continue
        h = " ".join(head.split())
        if re.search(r"\bnamespace\b", h) or h.startswith('extern "C"') or h == "extern":
            stack.append(("namespace", pos, ""))
        elif re.search(r"\b(class|struct|union|enum)\b", h) and "(" not in h.split("=")[0]:
            stack.append(("class", pos, ""))
        elif "(" in h and not h.rstrip().endswith("="):
            name = re.findall(r"([~\w:]+)\s*\(", h)
            stack.append(("function", pos, name[0] if name else "?"))
        else:
            stack.append(("block", pos, ""))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=80)
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    if a.max < 1:
        ap.error("--max must be at least 1")
    files = []
    for p in a.paths:
        if os.path.isdir(p):
            for d, _, fs in os.walk(p):
                files += [os.path.join(d, f) for f in sorted(fs) if f.endswith(EXTS)]
        elif os.path.isfile(p):
            files.append(p)
        else:
            print(f"check-function-length: no such file or directory: {p}", file=sys.stderr)
            return 2
    over, total = [], 0
    for f in sorted(files):
        with open(f, encoding="utf-8", errors="replace") as fh:
            for name, line, n in functions(strip(fh.read())):
                total += 1
                if n > a.max:
                    over.append(f"{f}:{line}: {name} is {n} lines (limit {a.max})")
    for o in over:
        print(o)
    print(f"check-function-length: {total} functions in {len(files)} files, {len(over)} over {a.max} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
