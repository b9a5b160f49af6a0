"""The payer usage summary of payer_usage: Markdown, and HTML with one inline SVG chart per
payer (fees per UTC day), drawn like council_report's (hand-written SVG)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_jobs.council_report import _esc, _html_table, _md_table

Row = dict[str, Any]
_BASE_COLOR, _CONGESTION_COLOR = "#1f77b4", "#ff7f0e"
PICODOLLARS_PER_DOLLAR = 10**12


@dataclass(frozen=True)
class UsageData:
    inputs: list[str]
    rows_read: int
    envelopes: int  # after deduplication
    usage: list[Row]  # per payer, originator and day
    payers: list[Row]  # totals per payer, by total fee descending

    @property
    def duplicates_removed(self) -> int:
        return self.rows_read - self.envelopes


def _address(row: Row) -> str:
    return "0x" + bytes(row["payer_address"]).hex()


def _dollars(picodollars: int) -> str:
    return f"${picodollars / PICODOLLARS_PER_DOLLAR:,.6f}"


_PAYER_HEADER = ("payer", "envelopes", "bytes", "base fees", "congestion fees", "total")
_DAY_HEADER = ("day", "originator", "envelopes", "bytes", "base fee (p$)", "congestion (p$)")


def _payer_rows(data: UsageData) -> list[tuple[object, ...]]:
    return [
        (
            _address(r),
            r["envelopes"],
            r["envelope_bytes"],
            _dollars(int(r["base_fee_picodollars"])),
            _dollars(int(r["congestion_fee_picodollars"])),
            _dollars(int(r["base_fee_picodollars"]) + int(r["congestion_fee_picodollars"])),
        )
        for r in data.payers
    ]


def _days_of(data: UsageData, payer: Row) -> list[Row]:
    return [r for r in data.usage if r["payer_address"] == payer["payer_address"]]


def _day_rows(rows: Sequence[Row]) -> list[tuple[object, ...]]:
    return [
        (
            r["day"],
            r["originator_node_id"],
            r["envelopes"],
            r["envelope_bytes"],
            int(r["base_fee_picodollars"]),
            int(r["congestion_fee_picodollars"]),
        )
        for r in rows
    ]


def _summary(data: UsageData) -> list[tuple[str, str]]:
    return [
        ("Envelope rows read", str(data.rows_read)),
        ("Rows not counted (duplicates, chain payloads)", str(data.duplicates_removed)),
        ("Paid envelopes", str(data.envelopes)),
        ("Payers", str(len(data.payers))),
    ]


def render_markdown(data: UsageData) -> str:
    lines = ["# Payer usage", "", f"Inputs: {', '.join(data.inputs)}", ""]
    lines += _md_table(("", ""), _summary(data))
    lines += _md_table(_PAYER_HEADER, _payer_rows(data))
    for payer in data.payers:
        lines += [f"## {_address(payer)}", ""]
        lines += _md_table(_DAY_HEADER, _day_rows(_days_of(data, payer)))
    lines += [_NOTES, ""]
    return "\n".join(lines)


_NOTES = (
    "Fees are the ones the originators signed into their envelopes (UnsignedOriginatorEnvelope "
    "fields 5 and 6), in picodollars; an envelope exported by several nodes counts once. "
    "Chain payloads carry no fees (the publishing node pays gas; see the node's payer_usage)."
)


def payer_chart(data: UsageData, payer: Row, width: int = 760, height: int = 200) -> str:
    """Stacked bars per UTC day: base fees, then congestion fees."""
    per_day: dict[str, tuple[int, int]] = {}
    for r in _days_of(data, payer):
        base, congestion = per_day.get(r["day"], (0, 0))
        per_day[r["day"]] = (
            base + int(r["base_fee_picodollars"]),
            congestion + int(r["congestion_fee_picodollars"]),
        )
    days = sorted(per_day)
    if not days:
        return ""
    top = max(max(sum(v) for v in per_day.values()), 1)
    left, bottom, plot_h = 40, 30, height - 46
    slot = (width - left - 10) / len(days)
    parts = [
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - 10}" y2="{height - bottom}" '
        'stroke="#444"/>'
    ]
    for i, day in enumerate(days):
        base, congestion = per_day[day]
        x = left + i * slot + slot * 0.1
        base_h = base / top * plot_h
        congestion_h = congestion / top * plot_h
        y = height - bottom - base_h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.8:.1f}" height="{base_h:.1f}" '
            f'fill="{_BASE_COLOR}"><title>{_esc(day)} base {base} p$</title></rect>'
        )
        parts.append(
            f'<rect x="{x:.1f}" y="{y - congestion_h:.1f}" width="{slot * 0.8:.1f}" '
            f'height="{congestion_h:.1f}" fill="{_CONGESTION_COLOR}">'
            f"<title>{_esc(day)} congestion {congestion} p$</title></rect>"
        )
        parts.append(
            f'<text x="{x:.1f}" y="{height - bottom + 14}" font-size="10">{_esc(day)}</text>'
        )
    label = f"{_address(payer)} fees per day"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{_esc(label)}">{"".join(parts)}</svg>'
    )


_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:820px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
    "text-align:left}"
)


def render_html(data: UsageData) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Payer usage</title><style>{_STYLE}</style></head><body>",
        "<h1>Payer usage</h1>",
        f"<p>Inputs: {_esc(', '.join(data.inputs))}</p>",
        _html_table(("", ""), _summary(data)),
        _html_table(_PAYER_HEADER, _payer_rows(data)),
    ]
    for payer in data.payers:
        parts += [f"<h2>{_esc(_address(payer))}</h2>", payer_chart(data, payer)]
        parts.append(_html_table(_DAY_HEADER, _day_rows(_days_of(data, payer))))
    parts += [f"<p><small>{_esc(_NOTES)}</small></p>", "</body></html>"]
    return "\n".join(parts)
