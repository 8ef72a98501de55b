"""Assemble the report page: pure functions from sections to one self-contained HTML string.

No external resources: styles are inline, plots are inline SVG.  All text is escaped here;
only plot SVG (from report/plots.py) and tables built by `table()` are inserted as markup.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

CSS = """
:root { --fg:#1d2327; --muted:#5f6b73; --line:#e3e6e8; --accent:#1f77b4; }
* { box-sizing: border-box; }
body { margin:0; font: 15px/1.5 -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif;
       color: var(--fg); background:#f6f7f8; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 48px; background:#fff; min-height:100vh; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 0 0 4px; }
.sub { color: var(--muted); margin: 0 0 18px; }
nav { margin: 0 0 20px; font-size: 14px; }
nav a { color: var(--accent); text-decoration: none; margin-right: 14px; white-space: nowrap; }
.cards { display:grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 12px;
         margin: 0 0 22px; }
.card { border:1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
.card .v { font-size: 22px; font-weight: 600; }
.card .k { color: var(--muted); font-size: 13px; }
section { border-top: 1px solid var(--line); padding: 18px 0 8px; }
section p.lead { color: var(--muted); margin: 0 0 10px; max-width: 900px; }
svg.plot { width: 100%; height: auto; display:block; }
.nodata { border: 1px dashed #c9cfd3; border-radius: 8px; padding: 18px; color: var(--muted);
          background: #fafbfb; }
.note { color: var(--muted); font-size: 13px; margin: 6px 0 0; }
table { border-collapse: collapse; margin: 10px 0 4px; font-size: 14px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 12px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { color: var(--muted); font-weight: 600; }
.headline { border-left: 4px solid var(--accent); padding: 4px 0 4px 14px; margin: 0 0 22px; }
.headline p { margin: 0 0 6px; max-width: 1000px; }
.headline p.muted { color: var(--muted); font-size: 13px; }
.good { color: #1a7f37; font-weight: 600; } .bad { color: #b42318; font-weight: 600; }
footer { color: var(--muted); font-size: 12px; margin-top: 28px; }
"""


@dataclass
class Section:
    key: str  # HTML id, e.g. "delivery"
    title: str
    lead: str  # one or two sentences: what the plot shows and how to read it
    svg: str | None = None  # inline SVG from report/plots.py; None -> the no-data note
    no_data: str = "No data for this section in the report window."
    tables: list[str] = field(default_factory=list)  # markup from table()
    notes: list[str] = field(default_factory=list)  # plain text, escaped here
    table_only: bool = False  # a section of tables: it has data when it has a table

    @property
    def has_data(self) -> bool:
        return self.svg is not None or (self.table_only and bool(self.tables))


@dataclass
class Card:
    label: str
    value: str


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def table(header: Sequence[str], rows: Sequence[Sequence[object]], classes: Sequence[Sequence[str]] = ()) -> str:
    """A small HTML table; cell text is escaped; `classes` optionally gives a class per cell."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for r, row in enumerate(rows):
        cells = []
        for c, cell in enumerate(row):
            cls = classes[r][c] if r < len(classes) and c < len(classes[r]) and classes[r][c] else ""
            attr = f' class="{esc(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{esc(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_section(section: Section) -> str:
    parts = [
        f'<section id="{esc(section.key)}">',
        f"<h2>{esc(section.title)}</h2>",
        f'<p class="lead">{esc(section.lead)}</p>',
    ]
    if section.svg is not None:
        parts.append(f'<div class="figure">{section.svg}</div>')
    elif not section.has_data:
        parts.append(f'<div class="nodata" data-nodata="{esc(section.key)}">{esc(section.no_data)}</div>')
    parts.extend(section.tables)
    parts.extend(f'<p class="note">{esc(n)}</p>' for n in section.notes)
    parts.append("</section>")
    return "\n".join(parts)


def render_headline(lines: Sequence[str], muted: Sequence[str] = ()) -> str:
    """The headline block under the cards: one paragraph per line (escaped), `muted` ones smaller."""
    if not lines and not muted:
        return ""
    body = "".join(f"<p>{esc(line)}</p>" for line in lines)
    body += "".join(f'<p class="muted">{esc(line)}</p>' for line in muted)
    return f'<div class="headline" id="headline">{body}</div>\n'


def render_page(
    title: str,
    subtitle: str,
    cards: Sequence[Card],
    sections: Sequence[Section],
    footer: str,
    headline: Sequence[str] = (),
    headline_notes: Sequence[str] = (),
) -> str:
    """The page; `headline` (and the smaller `headline_notes`) are paragraphs under the cards."""
    nav = " ".join(f'<a href="#{esc(s.key)}">{esc(s.title)}</a>' for s in sections)
    card_html = "".join(
        f'<div class="card"><div class="v">{esc(c.value)}</div><div class="k">{esc(c.label)}</div></div>' for c in cards
    )
    body = "\n".join(render_section(s) for s in sections)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n"
        f'<body><main>\n<h1>{esc(title)}</h1>\n<p class="sub">{esc(subtitle)}</p>\n'
        f'<nav>{nav}</nav>\n<div class="cards">{card_html}</div>\n{render_headline(headline, headline_notes)}{body}\n'
        f"<footer>{esc(footer)}</footer>\n</main></body></html>\n"
    )
