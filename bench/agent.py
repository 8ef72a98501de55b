"""Benchmark: the edge agent applies 10k prefixes, then replaces them with another 10k.

Runs in a throwaway network namespace (documentation addresses only; needs
root): an edge namespace whose default routes go via a veth to a router
namespace.  Each step is a full RouteApplier.apply: table dump, plan, batched
netlink writes and the read-back check.  Bar: <= 2 s per step.

    python -m bench.agent [--count 10000]
"""

from __future__ import annotations

import argparse
import ipaddress
import subprocess
import sys
import uuid

from collector.agent.apply import RouteApplier
from collector.agent.plan import Wanted
from collector.agent.routes import RouteTable


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


def prefixes(count: int, offset: int) -> dict[str, Wanted]:
    """`count` distinct canonical /56 under 2001:db8::/32 (2^24 of them), starting at `offset`."""
    base = int(ipaddress.IPv6Address("2001:db8::"))
    out: dict[str, Wanted] = {}
    for i in range(offset, offset + count):
        prefix = str(ipaddress.IPv6Network((base + (i << 72), 56)))
        out[prefix] = Wanted(prefix, "bbr", False)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10000)
    args = parser.parse_args(argv)
    edge, router = f"dagb-{uuid.uuid4().hex[:6]}", f"dagbr-{uuid.uuid4().hex[:6]}"
    tmp_a, tmp_b = f"v{uuid.uuid4().hex[:8]}", f"v{uuid.uuid4().hex[:8]}"
    made: list[str] = []
    try:
        for ns in (edge, router):
            sh("ip", "netns", "add", ns)
            made.append(ns)
        sh("ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b)
        sh("ip", "link", "set", tmp_a, "netns", edge)
        sh("ip", "link", "set", tmp_b, "netns", router)
        for ns, dev, v4, v6 in (
            (edge, tmp_a, "192.0.2.2/24", "2001:db8:1::2/64"),
            (router, tmp_b, "192.0.2.1/24", "2001:db8:1::1/64"),
        ):
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "addr", "add", v4, "dev", dev)
            sh("ip", "-n", ns, "addr", "add", v6, "dev", dev, "nodad")
        sh("ip", "-n", edge, "route", "add", "default", "via", "192.0.2.1")
        sh("ip", "-n", edge, "-6", "route", "add", "default", "via", "2001:db8:1::1")
        with RouteTable(edge) as table:
            applier = RouteApplier(table)
            results = []
            for label, wanted in (("apply", prefixes(args.count, 0)), ("replace", prefixes(args.count, args.count))):
                outcome = applier.apply(wanted)
                if not outcome.ok:
                    print(f"{label}: FAILED {outcome.errors[:3]}", file=sys.stderr)
                    return 1
                results.append((label, outcome))
                print(f"{label:8s} {args.count} prefixes: {outcome.seconds:.3f} s ({outcome.summary()})")
            empty = applier.apply({})
            print(f"{'remove':8s} {args.count} prefixes: {empty.seconds:.3f} s ({empty.summary()})")
        worst = max(o.seconds for _, o in results)
        print(f"bar <= 2 s per step: {'PASS' if worst <= 2.0 else 'FAIL'} (worst {worst:.3f} s)")
        return 0 if worst <= 2.0 else 1
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
