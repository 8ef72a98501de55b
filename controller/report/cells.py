"""Cell texts of the report's tables: rates, changes, signed percentages, the time resolution.

Pure formatting, shared by the section modules (sections_fleet, sections_did, sections_trials);
"–" stands for a value that cannot be shown.
"""

from __future__ import annotations

import math

from controller.report import data as report_data


def fmt_rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e6:.3g} Mbit/s"


def change_text(before: float, after: float) -> str:
    if before <= 0 or after <= 0:
        return "–"
    pct = (after / before - 1) * 100
    return f"{pct:+.0f}%" if abs(pct) >= 1 else f"{pct:+.1f}%"


def resolution(data: report_data.ReportData) -> str:
    """The time resolution in words: "5 minutes", "20 s"."""
    b = data.bucket_seconds
    return "5 minutes" if b == 300 else (f"{b // 60} minutes" if b % 60 == 0 and b > 60 else f"{b}\u00a0s")


def signed_pct(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    pct = value * 100
    return f"{pct:+.0f}%" if abs(pct) >= 10 else f"{pct:+.1f}%"
