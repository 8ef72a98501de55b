"""The evidence acceptance of the fleet lab: N runs of `dyncc demo` (route mode) and one `dyncc lab
--enforce bpf`, each summarised per path class (pooled trial effect with its interval;
selected / trialled / kept / reverted / running), plus the checks the lab must meet: lossy's lower bound
above 0, no lossy prefix reverted, >= 80 % of trialled deep prefixes reverted, no alternating,
low-RTT or fine prefix selected (neither trialled nor held out), the report's headline figures
equal to the terminal summary's, and the demo's wall time.  Needs root (network namespaces); not part
of the timed suite.

    python -m bench.lab_acceptance [--runs 5] [--bpf 1] [--out DIR]

Prints one table per run and a last table of the checks (runs met / runs).
"""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CLASSES = ("lossy", "deep", "alternating", "lowrtt", "fine")
ROW = re.compile(
    r"^(?P<klass>lossy|deep|alternating|lowrtt|fine)\s+(?P<prefixes>\d+)\s+(?P<trialled>\d+)\s+(?P<first>\S+)\s+"
    r"(?P<kept>\d+)\s+(?P<reverted>\d+)\s+(?P<running>\d+)\s+(?P<holdout>\d+)\s+(?P<effect>.*?)\s{2,}(?P<goodput>.*)$"
)
INTERVAL = re.compile(r"([+-]\d+%) \[([+-]\d+%), ([+-]\d+%)\]")


@dataclass
class ClassRow:
    klass: str
    prefixes: int
    trialled: int
    kept: int
    reverted: int
    running: int
    holdout: int
    effect: str
    goodput: str

    def bounds(self) -> tuple[float, float] | None:
        m = INTERVAL.search(self.effect)
        if not m:
            return None
        return float(m.group(2).rstrip("%")) / 100, float(m.group(3).rstrip("%")) / 100


@dataclass
class Run:
    name: str
    wall_s: float
    rc: int
    rows: dict[str, ClassRow] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    report_same: bool | None = None  # every figure of the summary's evidence lines is in the report
    app_limited: dict[str, tuple[int, int]] = field(default_factory=dict)  # class -> (app-limited, all)


def parse(stdout: str) -> tuple[dict[str, ClassRow], list[str]]:
    rows: dict[str, ClassRow] = {}
    evidence = []
    for line in stdout.splitlines():
        m = ROW.match(line)
        if m:
            g = m.groupdict()
            rows[g["klass"]] = ClassRow(
                g["klass"], int(g["prefixes"]), int(g["trialled"]), int(g["kept"]), int(g["reverted"]),
                int(g["running"]), int(g["holdout"]), g["effect"].strip(), g["goodput"].strip(),
            )  # fmt: skip
        if line.startswith(("BBR effect on", "trials: ", "app-limited samples")):
            evidence.append(line)
    return rows, evidence


def same_in_report(evidence: list[str], report: Path) -> bool:
    text = html.unescape(re.sub(r"<[^>]+>", " ", report.read_text(encoding="utf-8")))
    text = " ".join(text.split())
    figures = [f for line in evidence for f in INTERVAL.findall(line)]
    return bool(figures) and all(f"{e} [{lo}, {hi}]" in text for e, lo, hi in figures)


APP_LIMITED_SQL = (
    "SELECT prefix, countIf(app_limited != 0), count() FROM tcpinfo WHERE bytes_acked > 102400 GROUP BY prefix"
)
SHARE_SCRIPT = """
import csv, sys
from controller.store import open_store
asn = {r["prefix"]: int(r["asn"]) for r in csv.DictReader(open(sys.argv[2]))}
classes = ("lossy", "deep", "alternating", "lowrtt")
tally = {}
with open_store(sys.argv[1]) as store:
    for prefix, flagged, total in store.query_rows(sys.argv[3]):
        p = prefix.decode() if isinstance(prefix, bytes) else str(prefix)
        a = asn.get(p, 0)
        k = classes[a - 64496] if 64496 <= a < 64500 else "fine"
        f, t = tally.get(k, (0, 0))
        tally[k] = (f + int(flagged), t + int(total))
for k, (f, t) in sorted(tally.items()):
    print(k, f, t)
"""


def app_limited_shares(work: Path) -> dict[str, tuple[int, int]]:
    """Per class: (app-limited, all) qualifying samples of a demo's store (a child process: chDB
    holds one directory per process)."""
    url = f"chdb://{work / 'chdb'}?database=dyncc_lab"
    proc = subprocess.run(
        [sys.executable, "-c", SHARE_SCRIPT, url, str(work / "lab-asn.csv"), APP_LIMITED_SQL],
        capture_output=True,
        text=True,
        check=False,
    )
    out = {}
    for line in proc.stdout.splitlines():
        k, f, t = line.split()
        out[k] = (int(f), int(t))
    return out


def run_one(name: str, argv: list[str], report: Path | None) -> Run:
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    run = Run(name, time.monotonic() - started, proc.returncode)
    run.rows, run.evidence = parse(proc.stdout)
    if report is not None and report.exists():
        run.report_same = same_in_report(run.evidence, report)
        run.app_limited = app_limited_shares(report.parent)
    (Path(tempfile.gettempdir()) / f"lab-acceptance-{name}.log").write_text(proc.stdout + proc.stderr)
    return run


def print_run(run: Run) -> None:
    print(f"\n== {run.name}: exit {run.rc}, {run.wall_s:.0f} s wall")
    head = f"{'class':<12} {'selected':>8} {'trialled':>8} {'kept':>4} {'reverted':>8} {'running':>7}"
    print(f"{head}  p10 delivery rate, BBR vs CUBIC")
    for klass in CLASSES:
        r = run.rows.get(klass)
        if r:
            counts = f"{r.trialled + r.holdout:>8} {r.trialled:>8} {r.kept:>4} {r.reverted:>8} {r.running:>7}"
            print(f"{klass:<12} {counts}  {r.effect}")
    for line in run.evidence:
        print(f"  {line}")
    if run.report_same is not None:
        print(f"  report headline = terminal summary: {'yes' if run.report_same else 'NO'}")
    if run.app_limited:
        shares = ", ".join(f"{k} {f / t:.0%} of {t}" for k, (f, t) in sorted(run.app_limited.items()) if t)
        print(f"  app-limited share of qualifying samples: {shares}")


def checks(runs: list[Run]) -> list[tuple[str, int, int]]:
    def met(pred: object) -> int:
        return sum(1 for r in runs if callable(pred) and pred(r))

    def lossy_lower(r: Run) -> bool:
        b = r.rows.get("lossy") and r.rows["lossy"].bounds()
        return bool(b) and b[0] > 0  # type: ignore[index]

    def deep_reverted(r: Run) -> bool:
        d = r.rows.get("deep")
        return bool(d) and d.trialled > 0 and d.reverted >= 0.8 * d.trialled  # type: ignore[union-attr]

    def never(r: Run) -> bool:  # selected = trialled or held out
        rows = [r.rows.get(k) for k in ("alternating", "lowrtt", "fine")]
        return all(row is None or row.trialled + row.holdout == 0 for row in rows)

    demos = [r for r in runs if r.report_same is not None]
    return [
        ("lossy: pooled lower bound > 0", met(lossy_lower), len(runs)),
        ("lossy: no prefix reverted", met(lambda r: "lossy" in r.rows and r.rows["lossy"].reverted == 0), len(runs)),
        ("deep: >= 80 % of trialled reverted", met(deep_reverted), len(runs)),
        ("alternating, low-RTT, fine never selected", met(never), len(runs)),
        ("report headline = terminal summary", sum(1 for r in demos if r.report_same), len(demos)),
        ("demo under 8 minutes", sum(1 for r in demos if r.wall_s < 480 and r.rc == 0), len(demos)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="route-mode `dyncc demo` runs")
    parser.add_argument("--bpf", type=int, default=1, help="`dyncc lab --enforce bpf` runs")
    parser.add_argument("--rounds", type=int, default=24, help="rounds of the bpf lab run")
    parser.add_argument("--out", type=Path, default=None, help="where the runs' files go (default: a temp dir)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="dyncc-lab-acceptance-"))
    dyncc = str(Path(sys.executable).with_name("dyncc"))
    runs = []
    for i in range(args.runs):
        work = out / f"demo{i + 1}"
        report = work / "dyncc-demo-report.html"
        runs.append(run_one(f"demo{i + 1}", [dyncc, "demo", "--workdir", str(work)], report))
        print_run(runs[-1])
    for i in range(args.bpf):
        work = out / f"bpf{i + 1}"
        argv_bpf = [dyncc, "lab", "--enforce", "bpf", "--rounds", str(args.rounds), "--store-dir", str(work)]
        runs.append(run_one(f"bpf{i + 1}", argv_bpf, None))
        print_run(runs[-1])
    print("\n== checks (runs met / runs)")
    for name, ok, total in checks(runs):
        print(f"{name:<44} {ok}/{total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
