"""The security council's summary of misbehavior_aggregation: Markdown, and HTML with one
inline SVG chart per node (hand-written SVG: no plotting dependency)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from xnode.core.constants import NS_PER_SECOND

Row = dict[str, Any]

_COLORS = {1: "#1f77b4", 2: "#ff7f0e", 3: "#9467bd"}  # one per liveness type
_PROOF_COLOR = "#d62728"
_MAX_PROOFS_LISTED = 20


@dataclass(frozen=True)
class CouncilData:
    inputs: list[str]
    judged_share: str  # e.g. "1/3": more than this share of the enabled nodes flags
    window_minutes: int
    rows_read: int
    outcomes: dict[str, int]  # "accepted" or a rejection reason_code -> distinct reports
    liveness: list[Row]
    safety: list[Row]
    flagged: list[Row]
    refused_exports: dict[str, str]  # export directory -> why it was not read
    registry_block: int  # the NodeRegistry's history was read up to this block

    @property
    def threshold(self) -> int:
        """The most reporters any window needed (what the charts draw), at least two."""
        return max([2] + [int(r["needed"]) for r in self.liveness])

    @property
    def accepted(self) -> int:
        return self.outcomes.get("accepted", 0)

    @property
    def rejected(self) -> int:
        return sum(n for code, n in self.outcomes.items() if code != "accepted")

    @property
    def duplicates_removed(self) -> int:
        return self.rows_read - sum(self.outcomes.values())

    def flagged_by_basis(self) -> dict[int, set[str]]:
        """Each flagged node and the bases of its flags (safety_proof, liveness_threshold)."""
        bases: dict[int, set[str]] = {}
        for row in self.flagged:
            bases.setdefault(int(row["misbehaving_node_id"]), set()).add(str(row["basis"]))
        return bases

    def nodes(self) -> list[int]:
        rows = [*self.liveness, *self.safety, *self.flagged]
        return sorted({int(r["misbehaving_node_id"]) for r in rows})


def _time(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / NS_PER_SECOND, UTC).strftime("%Y-%m-%d %H:%M")


def _summary_rows(data: CouncilData) -> list[tuple[str, str]]:
    flagged = sorted({int(r["misbehaving_node_id"]) for r in data.flagged})
    rows = [
        ("Report rows read", str(data.rows_read)),
        ("Exact duplicates removed", str(data.duplicates_removed)),
        ("Accepted (signature verified)", str(data.accepted)),
        ("Rejected", str(data.rejected)),
    ]
    rows += [
        (f"  rejected: {code}", str(n))
        for code, n in sorted(data.outcomes.items())
        if code != "accepted"
    ]
    rows += [
        ("Verified safety proofs", str(len(data.safety))),
        ("Flagged nodes", ", ".join(map(str, flagged)) or "none"),
        (
            "Judged flags need",
            f"more than {data.judged_share} of the enabled nodes (at least 2) reporting in "
            f"one {data.window_minutes} min window",
        ),
        ("Registry (NodeRegistry events up to block)", str(data.registry_block)),
        ("Refused exports", str(len(data.refused_exports))),
    ]
    return rows


def _node_liveness(data: CouncilData, node: int) -> list[tuple[str, int, int, int, int]]:
    """(type name, reports, windows, flagged windows, max distinct reporters) per type."""
    out: dict[str, list[int]] = {}
    for r in data.liveness:
        if int(r["misbehaving_node_id"]) != node:
            continue
        agg = out.setdefault(str(r["type_name"]), [0, 0, 0, 0])
        agg[0] += int(r["report_count"])
        agg[1] += 1
        agg[2] += int(bool(r["flagged"]))
        agg[3] = max(agg[3], int(r["distinct_reporters"]))
    return [
        (name, reports, windows, flagged, reporters)
        for name, (reports, windows, flagged, reporters) in sorted(out.items())
    ]


def _node_status(data: CouncilData, node: int) -> str:
    reasons = [
        f"{r['type_name']} ({r['basis'].replace('_', ' ')}, evidence {r['evidence_count']})"
        for r in data.flagged
        if int(r["misbehaving_node_id"]) == node
    ]
    return "FLAGGED: " + "; ".join(reasons) if reasons else "not flagged"


def _proof_rows(data: CouncilData, node: int) -> list[tuple[str, ...]]:
    proofs = [r for r in data.safety if int(r["misbehaving_node_id"]) == node]
    return [
        (
            str(r["type_name"]),
            str(r["host_node_id"]),
            _time(r["reporter_time_ns"]),
            str(r["envelope_count"]),
            "-"
            if r["duplicate_sequence_id"] is None
            else f"{r['duplicate_originator']}:{r['duplicate_sequence_id']}",
        )
        for r in proofs[:_MAX_PROOFS_LISTED]
    ]


# --- Markdown ---------------------------------------------------------------------------------


def _md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


_LIVENESS_HEADER = ("type", "reports", "windows", "flagged windows", "max distinct reporters")
_PROOF_HEADER = ("type", "reported via host", "reporter time (UTC)", "envelopes", "dup o:seq")


def render_markdown(data: CouncilData) -> str:
    lines = ["# Misbehavior reports: security council summary", ""]
    lines += [f"Inputs: {', '.join(data.inputs)}", ""]
    lines += _md_table(("", ""), _summary_rows(data))
    if data.refused_exports:
        lines += ["Refused exports (not read):", ""]
        lines += _md_table(("export", "why"), sorted(data.refused_exports.items()))
    for node in data.nodes():
        lines += [f"## Node {node}", "", f"**{_node_status(data, node)}**", ""]
        if liveness := _node_liveness(data, node):
            lines += _md_table(_LIVENESS_HEADER, liveness)
        if proofs := _proof_rows(data, node):
            lines += ["Verified safety proofs:", "", *_md_table(_PROOF_HEADER, proofs)]
    lines += [_NOTES, ""]
    return "\n".join(lines)


_NOTES = (
    "Notes: reports are trusted only as far as their signatures go. A report whose host "
    "signature does not recover to the host's registry key is rejected as forged. Liveness "
    "reporters are registered nodes reporting on their own (submitted_by_node); "
    "client-submitted liveness reports are listed apart (client_liveness.parquet) and never "
    "count toward the threshold; a node's reports about itself do not make it a reporter, nor "
    "do a node's reports from a window in which the NodeRegistry did not keep it enabled. A "
    "safety report counts only when its own envelopes prove its claim (re-checked against "
    "the registry keys); one such proof flags a node."
)


# --- HTML and SVG -----------------------------------------------------------------------------


def _esc(value: object) -> str:
    return html.escape(str(value))


def _html_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@dataclass(frozen=True)
class _Frame:
    """Maps (time ns, reporters) to pixels."""

    t0: int
    t1: int
    y_max: int
    width: int = 760
    height: int = 220
    left: int = 40
    right: int = 10
    top: int = 16
    bottom: int = 36

    def x(self, t: float) -> float:
        span = max(self.t1 - self.t0, 1)
        return self.left + (t - self.t0) / span * (self.width - self.left - self.right)

    def y(self, v: float) -> float:
        return self.height - self.bottom - v / self.y_max * (self.height - self.top - self.bottom)


def _axes(f: _Frame, threshold: int) -> list[str]:
    parts = [
        f'<line x1="{f.left}" y1="{f.y(0):.1f}" x2="{f.width - f.right}" y2="{f.y(0):.1f}" '
        'stroke="#333"/>',
        f'<line x1="{f.left}" y1="{f.top}" x2="{f.left}" y2="{f.y(0):.1f}" stroke="#333"/>',
    ]
    step = max(1, f.y_max // 5)
    for v in range(0, f.y_max + 1, step):
        parts.append(
            f'<text x="{f.left - 4}" y="{f.y(v) + 4:.1f}" text-anchor="end" '
            f'font-size="10">{v}</text>'
        )
    parts.append(
        f'<line x1="{f.left}" y1="{f.y(threshold):.1f}" x2="{f.width - f.right}" '
        f'y2="{f.y(threshold):.1f}" stroke="{_PROOF_COLOR}" stroke-dasharray="4 3"/>'
        f'<text x="{f.width - f.right}" y="{f.y(threshold) - 3:.1f}" text-anchor="end" '
        f'font-size="10" fill="{_PROOF_COLOR}">threshold {threshold}</text>'
    )
    for t, anchor in ((f.t0, "start"), (f.t1, "end")):
        parts.append(
            f'<text x="{f.x(t):.1f}" y="{f.height - 20}" text-anchor="{anchor}" '
            f'font-size="10">{_esc(_time(t))} UTC</text>'
        )
    return parts


def _bars(f: _Frame, rows: Sequence[Row], width_ns: int) -> list[str]:
    bar = max(1.0, (f.x(f.t0 + width_ns) - f.x(f.t0)) / 3)
    parts = []
    for r in rows:
        kind = int(r["type"])
        x = f.x(int(r["window_start_ns"])) + (kind - 1) * bar
        y = f.y(int(r["distinct_reporters"]))
        title = (
            f"{r['type_name']} {_time(r['window_start_ns'])}: {r['distinct_reporters']} "
            f"reporters, {r['report_count']} reports"
        )
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{f.y(0) - y:.1f}" '
            f'fill="{_COLORS.get(kind, "#777")}"><title>{_esc(title)}</title></rect>'
        )
    return parts


def _proof_marks(f: _Frame, proofs: Sequence[Row]) -> list[str]:
    parts = []
    for r in proofs:
        x, y = f.x(int(r["reporter_time_ns"])), f.top
        title = f"{r['type_name']} proof via node {r['host_node_id']}"
        parts.append(
            f'<path d="M{x:.1f},{y + 8} l-5,-8 h10 z" fill="{_PROOF_COLOR}">'
            f"<title>{_esc(title)}</title></path>"
        )
    return parts


def _legend(f: _Frame) -> str:
    items = [
        (_COLORS[1], "UNRESPONSIVE_NODE"),
        (_COLORS[2], "SLOW_NODE"),
        (_COLORS[3], "FAILED_REQUEST"),
        (_PROOF_COLOR, "safety proof"),
    ]
    parts, x = [], f.left
    for color, name in items:
        parts.append(
            f'<rect x="{x}" y="{f.height - 12}" width="10" height="10" fill="{color}"/>'
            f'<text x="{x + 14}" y="{f.height - 3}" font-size="10">{name}</text>'
        )
        x += 24 + 7 * len(name)
    return "".join(parts)


def node_chart(data: CouncilData, node: int) -> str:
    """Distinct reporters per window and liveness type, the threshold, and safety proofs."""
    rows = [r for r in data.liveness if int(r["misbehaving_node_id"]) == node]
    proofs = [r for r in data.safety if int(r["misbehaving_node_id"]) == node]
    times = [int(r["window_start_ns"]) for r in rows] + [int(r["window_end_ns"]) for r in rows]
    times += [int(r["reporter_time_ns"]) for r in proofs]
    if not times:
        return ""
    y_max = max([data.threshold + 1] + [int(r["distinct_reporters"]) + 1 for r in rows])
    f = _Frame(min(times), max(times), y_max)
    body = _axes(f, data.threshold) + _bars(f, rows, data.window_minutes * 60 * NS_PER_SECOND)
    body += _proof_marks(f, proofs)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{f.width}" height="{f.height}" '
        f'role="img" aria-label="node {node} reports">{"".join(body)}{_legend(f)}</svg>'
    )


_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:820px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
    "text-align:left}.flagged{color:#b00;font-weight:bold}.ok{color:#070}"
)


def render_html(data: CouncilData) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Misbehavior summary</title><style>{_STYLE}</style></head><body>",
        "<h1>Misbehavior reports: security council summary</h1>",
        f"<p>Inputs: {_esc(', '.join(data.inputs))}</p>",
        _html_table(("", ""), _summary_rows(data)),
    ]
    if data.refused_exports:
        parts += [
            "<p>Refused exports (not read):</p>",
            _html_table(("export", "why"), sorted(data.refused_exports.items())),
        ]
    for node in data.nodes():
        status = _node_status(data, node)
        css = "flagged" if status.startswith("FLAGGED") else "ok"
        parts += [f"<h2>Node {node}</h2>", f"<p class='{css}'>{_esc(status)}</p>"]
        parts.append(node_chart(data, node))
        if liveness := _node_liveness(data, node):
            parts.append(_html_table(_LIVENESS_HEADER, liveness))
        if proofs := _proof_rows(data, node):
            parts += ["<p>Verified safety proofs:</p>", _html_table(_PROOF_HEADER, proofs)]
    parts += [f"<p><small>{_esc(_NOTES)}</small></p>", "</body></html>"]
    return "\n".join(parts)
