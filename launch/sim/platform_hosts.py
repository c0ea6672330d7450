#!/usr/bin/env python3
"""platform_hosts.py PLATFORM [HOSTFILE]: the hosts of a SimGrid platform
file, one "name cores" line each, in the file's order (what
launch/ringattn-sim.sh checks a run against); with HOSTFILE, its host
names are checked against them first. A missing or malformed file, or a
host name the platform does not have: exit 2 and one line naming it."""
import sys
import xml.etree.ElementTree as ET


def fail(msg):
    print(f"ringattn-sim.sh: {msg}", file=sys.stderr)
    sys.exit(2)


def radical_ids(radical, where):
    """'0-3,7' -> [0, 1, 2, 3, 7]."""
    ids = []
    for part in radical.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            fail(f"{where}: radical '{radical}' is not like 0-1023")
        if b < a:
            fail(f"{where}: radical '{radical}' runs backwards")
        ids.extend(range(a, b + 1))
    return ids


def cores_of(elem, where):
    try:
        cores = int(elem.get("core", "1"))
    except ValueError:
        fail(f"{where}: core '{elem.get('core')}' is not a count")
    if cores < 1:
        fail(f"{where}: core '{cores}' is not a count")
    return cores


def platform_hosts(path):
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError:
        fail(f"--platform {path}: no such file")
    except (ET.ParseError, OSError) as e:
        fail(f"--platform {path}: malformed platform ({e})")
    if root.tag != "platform":
        fail(f"--platform {path}: malformed platform (the root is <{root.tag}>, "
             "not <platform>)")
    hosts = []
    for elem in root.iter():
        if elem.tag == "host":
            if not elem.get("id"):
                fail(f"--platform {path}: a <host> without an id")
            hosts.append((elem.get("id"), cores_of(elem, f"--platform {path}")))
        elif elem.tag == "cluster":
            where = f"--platform {path}: cluster '{elem.get('id', '?')}'"
            if elem.get("radical") is None:
                fail(f"{where}: no radical")
            cores = cores_of(elem, where)
            for i in radical_ids(elem.get("radical"), where):
                hosts.append((f"{elem.get('prefix', '')}{i}{elem.get('suffix', '')}",
                              cores))
    if not hosts:
        fail(f"--platform {path}: malformed platform (no host nor cluster)")
    return hosts


def check_hostfile(path, names):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail(f"--hostfile {path}: {e.strerror}")
    for no, line in enumerate(lines, 1):
        name = line.strip().split(":")[0]
        if name and name not in names:
            fail(f"--hostfile {path} line {no}: unknown host '{name}' "
                 "(not in the platform)")


def main():
    hosts = platform_hosts(sys.argv[1])
    if len(sys.argv) > 2:
        check_hostfile(sys.argv[2], {h for h, _ in hosts})
    for name, cores in hosts:
        print(name, cores)


if __name__ == "__main__":
    main()
