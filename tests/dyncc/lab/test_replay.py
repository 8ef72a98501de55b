"""Demo replay: time dilation of telemetry and access logs (pure) and the non-root replay of the
committed fleet-lab recording."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dyncc.lab.replay import (
    DEFAULT_RECORDING,
    REAL_BUCKET,
    dilate,
    dilate_log_lines,
    dilation,
    recorded_access_logs,
    split_by_bucket,
)
from dyncc.lab.telemetry import batch_times, read_recording
from dyncc.lab.topology import CLASSES
from tests.support.recording import make_batch

S = 1_000_000_000


def test_dilation_maps_lab_buckets_onto_five_minute_buckets():
    rs = 20
    first = (1_700_000_000 // rs * rs + 3) * S  # 3 s into a lab bucket
    last = first + (5 * rs + 1) * S  # 6 lab buckets touched
    now = 1_800_000_123
    d = dilation(first, last, rs, now)
    assert d.factor == REAL_BUCKET / rs
    assert d.buckets == 6
    assert d.anchor_s % REAL_BUCKET == 0
    assert d.boundaries()[-1] == now // REAL_BUCKET * REAL_BUCKET <= now
    # each lab bucket [k*rs, (k+1)*rs) lands in replay bucket k
    for k in range(6):
        t_lab = (d.origin_s + k * rs) * S
        for off in (0, rs * S - 1):
            t = d.map_ns(t_lab + off)
            assert (t // S - d.anchor_s) // REAL_BUCKET == k
    with pytest.raises(ValueError):
        dilation(last, first, rs, now)


def test_dilate_shifts_every_record_and_keeps_order():
    rs = 10
    base = 1_700_000_000 // rs * rs * S
    records = [make_batch([i], ["198.51.100.0/24"], ["cubic"], start_ns=base + i * 4 * S) for i in range(8)]
    out, d = dilate(records, rs, now_s=1_800_000_000)
    times = [batch_times(r)[0] for r in out]
    assert times == sorted(times)
    assert times[-1] // S <= 1_800_000_000
    groups = split_by_bucket(out, d)
    assert sum(map(len, groups)) == 8
    # 4 s apart on the lab clock = 2 minutes apart after a x30 stretch
    assert times[1] - times[0] == 4 * S * (REAL_BUCKET // rs)


def test_dilate_log_lines_moves_msec_onto_the_replay_buckets():
    rs = 15
    base = 1_700_000_000 // rs * rs
    d = dilation(base * S, (base + 3 * rs) * S, rs, 1_800_000_000)
    lines = [
        b'%d.250 2001:db8:101:100::2 200 1048931 1048576 0.874 17 2 "GET /obj/1m-3.bin HTTP/1.1"\n' % (base + 1),
        b'%d.000 198.51.100.2 200 10300 10240 0.011 18 1 "GET /obj/10k-0.bin HTTP/1.1"\n' % (base + 2 * rs + 7),
        b"garbage line\n",
    ]
    groups = dilate_log_lines(lines, d)
    assert [len(g) for g in groups] == [1, 0, 1, 1]
    first = groups[0][0].split(b" ", 1)
    t = float(first[0])
    assert (int(t) - d.anchor_s) // REAL_BUCKET == 0 and first[1] == lines[0].split(b" ", 1)[1]
    assert abs(t - (d.anchor_s + 1.25 * REAL_BUCKET / rs)) < 1e-3  # 1.25 s after the lab bucket start, x20
    assert groups[3] == [b"garbage line\n"]  # left for the loader to dead-letter


def test_committed_recording_is_small_and_readable():
    assert DEFAULT_RECORDING.exists(), "demo/lab-telemetry.bin.gz must be committed"
    size = DEFAULT_RECORDING.stat().st_size + sum(p.stat().st_size for p in DEFAULT_RECORDING.parent.glob("*.log.gz"))
    assert size < 12 << 20
    records, meta = read_recording(DEFAULT_RECORDING)
    assert len(records) == meta["records"] > 50
    assert meta["format"] == "dyncc-lab-recording-2" and meta["round_seconds"] > 0
    assert {v[1] for v in meta["prefixes"].values()} == {"lossy", "deep", "alternating", "lowrtt", "fine"}
    assert len({v[0] for v in meta["prefixes"].values()}) == 2
    logs = recorded_access_logs(DEFAULT_RECORDING)
    assert sorted(logs) == sorted(h for hosts in meta["pops"].values() for h in hosts)
    assert all(len(lines) > 100 for lines in logs.values())


@pytest.mark.slow
def test_demo_replay_as_non_root_writes_report_with_plots(request):
    """`dyncc demo` as nobody: one-line reason, replay through ingest, the access-log loader and
    scoring, the per-class summary, a report with plots."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to the nobody user")
    work = Path(tempfile.mkdtemp(prefix="dyncc-demo-test-"))  # /tmp: reachable by nobody
    os.chmod(work, 0o777)
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    dyncc = Path(sys.executable).with_name("dyncc")
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(dyncc), "demo", "--workdir", str(work)]
    env = {**os.environ, "HOME": str(work), "TMPDIR": str(work)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env, cwd=str(work))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    first = out.splitlines()[0]
    assert first.startswith("dyncc demo: not root") and "replaying" in first
    m = re.search(r"^report: (\S+)", out, re.M)
    assert m, out
    report = Path(m.group(1))
    assert report.exists() and report.stat().st_size > 10_000
    html = report.read_text()
    assert html.count("<svg") >= 4
    published = re.search(r'<div class="[^"]*">(\d+)</div><div class="k">config versions published', html)
    assert published and int(published.group(1)) >= 1, "no published config version in the report window"
    # the per-class summary: lossy and deep prefixes selected, fine / low-RTT / alternating never,
    # deep ones reverted
    rows = {
        line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0] in CLASSES
    }
    assert set(rows) == set(CLASSES), out
    assert int(rows["lossy"][2]) > 0 and int(rows["deep"][2]) > 0, out
    assert int(rows["deep"][5]) > 0, out
    for klass in ("fine", "lowrtt", "alternating"):
        assert int(rows[klass][2]) == 0, out
    assert re.search(r"\d+ HTTP requests", out) and " 0 HTTP requests" not in out
