#!/usr/bin/env python3
"""longest-functions.py [--top K] [--max N] [--max-params N] [DIR...]: the
longest C functions, and those with the most parameters.

Prints the K (default 10) longest function definitions of the C sources under
DIR (default: engine comm io launch python, relative to the repository), longest
first, as `file:line name length`, where length counts the lines from the
one holding the function's name to its closing brace. With --max N, exits 1
when a function outside the inner kernels (engine/kernel.c, engine/vexp.c,
engine/simd*.c: the tiled kernel's hot loop and the SIMD routines) is longer
than N lines, listing each; with --max-params N, exits 1 when a function
outside them takes more than N parameters. Functions are found by brace matching after
comments, strings and preprocessor lines are blanked; no ctags needed."""
import argparse
import fnmatch
import os
import re
import statistics
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
DEFAULT_DIRS = ["engine", "comm", "io", "launch", "python"]
INNER_KERNELS = ["engine/kernel.c", "engine/vexp.c", "engine/simd*.c"]
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do"}


def blank(text):
    """text with comments, string and char literals and preprocessor lines
    replaced by spaces; newlines kept, so line numbers stay."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and text[i:].lstrip(" \t").startswith("#"):
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            out.append(c)
            at_line_start = c == "\n" or (at_line_start and c in " \t")
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        at_line_start = False
        i = j
    return "".join(out)


def function_name(head):
    """The name of the function whose definition header is head (the text
    between the previous top-level declaration and its opening brace), or
    None when head is not a function header (struct, initialiser...)."""
    head = head.rstrip()
    if not head.endswith(")") or "=" in head:
        return None
    depth = 0
    for k in range(len(head) - 1, -1, -1):
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"([A-Za-z_]\w*)\s*$", head[:k])
                if m and m.group(1) not in KEYWORDS:
                    return m.group(1), m.start(1), params_of(head[k + 1:-1])
                return None
    return None


def params_of(plist):
    """The number of parameters in a definition's parameter list."""
    plist = plist.strip()
    if plist in ("", "void"):
        return 0
    depth, count = 0, 1
    for c in plist:
        depth += c in "(["
        depth -= c in ")]"
        count += c == "," and depth == 0
    return count


def functions(path):
    """(line, name, length, parameters) of each function defined in the
    file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank(f.read())
    found, depth, head_start, body = [], 0, 0, None
    for i, c in enumerate(text):
        if c == "{":
            if depth == 0:
                named = function_name(text[head_start:i])
                if named:
                    name, at, nparams = named
                    body = (name, text.count("\n", 0, head_start + at) + 1,
                            nparams)
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if body:
                    name, line, nparams = body
                    end = text.count("\n", 0, i) + 1
                    found.append((line, name, end - line + 1, nparams))
                body, head_start = None, i + 1
        elif c == ";" and depth == 0:
            head_start = i + 1
    return found


def c_files(dirs):
    for d in dirs:
        top = os.path.join(ROOT, d) if not os.path.isabs(d) else d
        for folder, _, names in sorted(os.walk(top)):
            for name in sorted(names):
                if name.endswith(".c"):
                    yield os.path.join(folder, name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=10, metavar="K")
    ap.add_argument("--max", type=int, metavar="N")
    ap.add_argument("--max-params", type=int, metavar="N")
    ap.add_argument("dirs", nargs="*", default=DEFAULT_DIRS, metavar="DIR")
    args = ap.parse_args()
    rows = []
    for path in c_files(args.dirs):
        rel = os.path.relpath(path, ROOT)
        kernel = any(fnmatch.fnmatch(rel, g) for g in INNER_KERNELS)
        rows += [(length, rel, line, name, kernel, nparams)
                 for line, name, length, nparams in functions(path)]
    if not rows:
        print("ringattn: longest-functions: no C function found under "
              + " ".join(args.dirs), file=sys.stderr)
        return 2
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    for length, rel, line, name, kernel, _ in rows[:args.top]:
        print(f"{rel}:{line} {name} {length}" + ("  (inner kernel)" if kernel
                                                  else ""))
    lengths = sorted(r[0] for r in rows)
    print(f"# {len(rows)} functions, median {statistics.median(lengths):g} "
          f"lines, {sum(1 for n in lengths if n > 60)} over 60")
    wide = sorted(rows, key=lambda r: (-r[5], r[1], r[2]))
    print(f"# most parameters: " + ", ".join(f"{r[3]} {r[5]}"
                                             for r in wide[:3]))
    over = [r for r in rows if args.max is not None and r[0] > args.max
            and not r[4]]
    for length, rel, line, name, _, _ in over:
        print(f"{rel}:{line}: {name} is {length} lines, over {args.max}",
              file=sys.stderr)
    many = [r for r in wide if args.max_params is not None and
            r[5] > args.max_params and not r[4]]
    for _, rel, line, name, _, nparams in many:
        print(f"{rel}:{line}: {name} takes {nparams} parameters, over "
              f"{args.max_params}", file=sys.stderr)
    return 1 if over or many else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as e:
        print(f"ringattn: longest-functions: {e}", file=sys.stderr)
        sys.exit(2)
