"""`dyncc report`: query the store, draw the plots, write one self-contained HTML page.

Modules: data (the queries and their windows, and the effect model's data), trials (the
headline and per-prefix figures of the one effect model, controller/evidence; pure), effects
(the treated-versus-holdout difference in differences with its bootstrap interval, a secondary
population check; pure), asn (prefix -> ASN names), plots, html (the HTML), cells (table cell
texts), sections_fleet / sections_trials / sections_did (the sections), page (cards and
sections in order), write (write_report, the library entry point; re-exported here), cli.
write_report is loaded on first use, so `dyncc report --help` does not load pandas and
matplotlib.  What the sections show and how they are defined: docs/report.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.report.write import write_report

__all__ = ["write_report"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from controller.report import write

        return getattr(write, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
