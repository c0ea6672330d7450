#!/usr/bin/env python3
"""check_exports.py NM LIBRARY HEADER: the shared library exports exactly the
functions that HEADER declares with RA_API, no more and no fewer.

The symbols come from `NM -D --defined-only LIBRARY` (less the few that
linkers add to every shared object); the API from the header itself
(comments and preprocessor lines dropped, then every declaration that starts
with RA_API gives the name before its parameter list). Exit 0 when
the two sets are equal, 1 with both differences listed otherwise, 2 when a
file cannot be read."""
import re
import subprocess
import sys

# Symbols some linkers define in every shared object; not the library's code.
LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def header_api(path):
    """The names of the functions declared RA_API in the header."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = "\n".join(l for l in text.splitlines()
                     if not l.lstrip().startswith("#"))
    return set(re.findall(r"\bRA_API\b[^;{(]*?\b([A-Za-z_]\w*)\s*\(", text))


def library_exports(nm, path):
    """The defined dynamic symbols of the shared library."""
    out = subprocess.run([nm, "-D", "--defined-only", path], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            names.add(fields[2].split("@")[0])
    return names - LINKER_SYMBOLS


def main(argv):
    if len(argv) != 4:
        print("usage: check_exports.py NM LIBRARY HEADER", file=sys.stderr)
        return 2
    nm, lib, header = argv[1:]
    try:
        api = header_api(header)
        exported = library_exports(nm, lib)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"ringattn: check_exports: {e}", file=sys.stderr)
        return 2
    if not api:
        print(f"ringattn: {header}: no RA_API declaration found",
              file=sys.stderr)
        return 1
    extra, missing = sorted(exported - api), sorted(api - exported)
    for name in extra:
        print(f"exported but not RA_API in {header}: {name}")
    for name in missing:
        print(f"RA_API in {header} but not exported: {name}")
    print(f"{len(api)} RA_API functions, {len(exported)} exported symbols: "
          f"{'PASS' if not extra and not missing else 'FAIL'}")
    return 1 if extra or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
