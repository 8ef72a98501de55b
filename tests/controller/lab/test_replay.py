"""Demo replay: time dilation (pure) and the non-root replay of the committed recording."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from controller.lab.replay import DEFAULT_RECORDING, REAL_BUCKET, dilate, dilation, split_by_bucket
from controller.lab.telemetry import batch_times, read_recording
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


def test_committed_recording_is_small_and_readable():
    assert DEFAULT_RECORDING.exists(), "demo/lab-telemetry.bin.gz must be committed"
    assert DEFAULT_RECORDING.stat().st_size < 4 << 20
    records, meta = read_recording(DEFAULT_RECORDING)
    assert len(records) == meta["records"] > 50
    assert meta["round_seconds"] > 0 and set(meta["prefixes"].values()) >= {"slow", "fine"}


@pytest.mark.slow
def test_demo_replay_as_non_root_writes_report_with_plots(request):
    """`dyncc demo` as nobody: one-line reason, replay through ingest + scoring, a report with plots."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to the nobody user")
    work = Path(tempfile.mkdtemp(prefix="dyncc-demo-test-"))  # /tmp: reachable by nobody
    os.chmod(work, 0o777)
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    dyncc = Path(sys.executable).with_name("dyncc")
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(dyncc), "demo", "--workdir", str(work)]
    env = {**os.environ, "HOME": str(work), "TMPDIR": str(work)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=str(work))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    first = out.splitlines()[0]
    assert first.startswith("dyncc demo: not root") and "replaying" in first
    m = re.search(r"^report: (\S+)", out, re.M)
    assert m, out
    report = Path(m.group(1))
    assert report.exists() and report.stat().st_size > 10_000
    html = report.read_text()
    assert html.count("<svg") >= 2
    # configs published by the replayed rounds carry the replay's clock, so the report marks them
    published = re.search(r'<div class="[^"]*">(\d+)</div><div class="k">config versions published', html)
    assert published and int(published.group(1)) >= 1, "no published config version in the report window"
    # the consistently slow prefixes of the recording are selected by the replayed scoring rounds
    _records, meta = read_recording(DEFAULT_RECORDING)
    slow = [p for p, prof in meta["prefixes"].items() if prof == "slow"]
    sel = re.search(r"^selected for bbr: (.*)$", out, re.M)
    assert sel and all(p in sel.group(1) for p in slow), out
