#!/usr/bin/python3
"""plan_platform.py: `ringattn plan --platform FILE` (issue 40, part 3).

    plan_platform.py RINGATTN PLATFORM_DIR

The model reads the machine a simulation runs on: for each shipped SimGrid
platform (and a flat SHARED cluster with a backbone written here), plan
--platform predicts exactly what plan predicts with the equivalent explicit
options (--nodes, --cores, --link-rate, --link-latency), which this test
works out from the XML itself (Python's XML parser, not plan's reader) and
SMPI's network model (the factors of a large message's bandwidth and
latency, and a backbone's bandwidth shared by the nodes that send), at 4
and 16 nodes. Then the refusals: a missing or
malformed platform file, more nodes than it has, --platform beside an
option it stands for: exit 2, one `ringattn:` line naming the file (or the
option) and the problem, no output file. No times are compared with a
clock: only the model's arithmetic.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

RATE = {"Bps": 1.0, "bps": 0.125, "kBps": 1e3, "MBps": 1e6, "GBps": 1e9,
        "Gbps": 1.25e8, "Mbps": 1.25e5}
TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
SHAPE = ["--seq", "4099", "--heads", "8", "--kv-heads", "4", "--dim", "32",
         "--causal"]


def quantity(text, units):
    num, unit = re.fullmatch(r"([0-9.eE+-]+)([A-Za-z]*)", text).groups()
    return float(num) * units[unit]


# SMPI's default factors for messages of 64 KiB and more (smpi/bw-factor,
# smpi/lat-factor), which ringattn-sim runs under
SMPI_BW, SMPI_LAT = 0.940694, 11.6436


def explicit_options(path, nodes):
    """The options a user would give for this platform's cluster at this
    many nodes: the route between neighbouring nodes (up to the switch and
    down; one link on a torus; plus the backbone of a flat cluster), a
    SHARED link halved, a flat cluster's backbone shared by the nodes, in
    SMPI's network model."""
    c = next(ET.parse(path).getroot().iter("cluster"))
    topo = c.get("topology", "FLAT")
    bw = SMPI_BW * quantity(c.get("bw"), RATE)
    lat = quantity(c.get("lat"), TIME) * (1 if topo == "TORUS" else 2)
    if c.get("sharing_policy") == "SHARED":
        bw /= 2
    if topo == "FLAT" and c.get("bb_bw"):
        share = SMPI_BW * quantity(c.get("bb_bw"), RATE) / nodes
        bw = min(bw, share) if nodes > 1 else bw
        lat += quantity(c.get("bb_lat"), TIME)
    return ["--nodes", str(nodes), "--cores", str(nodes * int(c.get("core"))),
            "--link-rate", repr(bw * 8), "--link-latency",
            repr(SMPI_LAT * lat)]


def plan(cli, args, out):
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([cli, "plan", *SHAPE, *args, "--json", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL plan {' '.join(args)}: exit {r.returncode}: "
                 f"{r.stderr.strip()}")
    with open(out) as f:
        doc = json.load(f)
    rows = doc["rows"] + doc["sweep"]
    for row in rows:
        row.pop("platform", None)
    return rows


def same_prediction(cli, path, tmp):
    a, b = [], []
    for nodes in (4, 16):
        a += plan(cli, ["--platform", path, "--ranks", "16", "--nodes",
                        str(nodes)], f"{tmp}/a.json")
        b += plan(cli, [*explicit_options(path, nodes), "--ranks", "16"],
                  f"{tmp}/b.json")
    if a != b or not a:
        sys.exit(f"FAIL {path}: plan --platform and the explicit options "
                 f"{explicit_options(path, 16)} predict differently")
    timed = [r["time_s"] for r in a if r["applies"]]
    if len(timed) < 3 or not all(t > 0 for t in timed):
        sys.exit(f"FAIL {path}: fewer than 3 strategies with a time: {timed}")
    print(f"ok   {os.path.basename(path)}: {len(a)} rows equal the explicit "
          "options'")


CLUSTER = ('<cluster id="c" prefix="n-" suffix="" radical="0-63" core="4" '
           'speed="1Gf" bw="10Gbps" lat="10us" {}/>')
MALFORMED = {  # file text (None: no file), what the line must say
    "missing": (None, "No such file"),
    "not-xml": ("this is not a platform\n", "no <platform>"),
    "root": ('<zone id="z">' + CLUSTER.format("") + "</zone>", "root"),
    "no-cluster": ('<platform version="4.1"><zone id="z" routing="Full">'
                   "</zone></platform>", "no <cluster>"),
    "two": ("<platform>" + CLUSTER.format("") * 2 + "</platform>",
            "more than one"),
    "unit": ("<platform>" + CLUSTER.format("").replace("10Gbps", "10 fast")
             + "</platform>", "bw '10 fast'"),
    "no-lat": ("<platform>" + CLUSTER.format("").replace('lat="10us"', "")
               + "</platform>", "no lat"),
    "radical": ("<platform>" + CLUSTER.format("").replace("0-63", "9-2")
                + "</platform>", "radical"),
    "topology": ("<platform>" + CLUSTER.format('topology="RING"')
                 + "</platform>", "topology 'RING'"),
    "host": ('<platform><zone id="z"><host id="a" speed="1Gf"/></zone>'
             "</platform>", "<host>"),
    "unclosed": ("<platform><zone id='z'>" + CLUSTER.format(""), "not closed"),
    "comment": ("<platform><!-- " + CLUSTER.format(""), "does not end"),
    "mismatch": ("<platform><zone id='z'>" + CLUSTER.format("")
                 + "</platform></zone>", "where <zone> is open"),
}


def refused(cli, args, want, tmp, name):
    out = f"{tmp}/refused.json"
    ranks = [] if "--ranks" in args else ["--ranks", "4"]
    r = subprocess.run([cli, "plan", *SHAPE, *ranks, *args, "--json", out],
                       capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    ok = (r.returncode == 2 and len(lines) == 1
          and all(w in lines[0] for w in want)
          and lines[0].startswith("ringattn:") and not os.path.exists(out))
    if not ok:
        sys.exit(f"FAIL {name}: exit {r.returncode}, stderr {r.stderr!r}, "
                 f"wanted one line with {want}")
    print(f"ok   refused {name}: {lines[0]}")


def main():
    cli, pdir = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        flat = f"{tmp}/flat-shared.xml"
        with open(flat, "w") as f:
            f.write('<?xml version="1.0"?>\n<!-- a flat cluster -->\n'
                    '<platform version="4.1"><zone id="w" routing="Full">'
                    + CLUSTER.format('sharing_policy="SHARED" bb_bw="1GBps" '
                                     'bb_lat="3us"') + "</zone></platform>\n")
        shipped = sorted(f"{pdir}/{n}" for n in os.listdir(pdir)
                         if n.endswith(".xml"))
        if len(shipped) < 4:
            sys.exit(f"FAIL: {len(shipped)} shipped platforms in {pdir}")
        for path in shipped + [flat]:
            same_prediction(cli, path, tmp)
        for name, (text, want) in MALFORMED.items():
            path = f"{tmp}/{name}.xml"
            if text is not None:
                with open(path, "w") as f:
                    f.write(text)
            refused(cli, ["--platform", path], [path, want], tmp, name)
        refused(cli, ["--platform", flat, "--sweep-nodes", "8,128"],
                ["128 nodes asked for and the platform has 64"], tmp, "nodes")
        refused(cli, ["--platform", flat, "--nodes", "1", "--ranks", "5"],
                ["--ranks: 5 ranks on 1 nodes of 4 cores"], tmp, "cores")
        refused(cli, ["--platform", flat, "--link-rate", "1e9"],
                ["--link-rate: --platform gives"], tmp, "both")
    print("PASS plan_platform")


if __name__ == "__main__":
    main()
