"""The pull-request chart: delivered before → after per subscription, as a Mermaid ``xychart-beta``.

GitHub renders Mermaid in markdown, so the comment carries the chart with nothing to host. The
xychart has no stacked bars and no legend, and draws every bar series of a category from the axis,
one over the other, in the order given. So each subscription gets two rows — *before* and *after*
— and three series are drawn in turn: the before total (red), the after total (green), then what
is delivered both before and after (grey) over them. What shows of the red is the messages the
subscription loses, what shows of the green those it gains; each row's label carries the numbers.
(A renderer that puts bar series side by side instead still shows, per row, the total beside
what is kept.)
"""

from __future__ import annotations

import json
from typing import Sequence

from reconciler.traffic.report.model import SubscriptionImpact

LOST, GAINED, KEPT = "#cf222e", "#1a7f37", "#8c959f"
LABEL_WIDTH = 48


def movement_chart(moves: Sequence[SubscriptionImpact], rows: int) -> list[str]:
    """The fenced Mermaid block for the first ``rows`` movements (the largest first)."""
    shown = list(moves[:rows])
    labels = _unique([label for m in shown for label in _labels(m)])
    before = [v for m in shown for v in (m.delivered_before, 0)]
    after = [v for m in shown for v in (0, m.delivered)]
    kept = [v for m in shown for v in (m.kept, m.kept)]
    top = max(max(m.delivered_before, m.delivered) for m in shown)
    init = {
        "xyChart": {"width": 900, "height": max(240, 40 * len(shown) + 110)},
        "themeVariables": {"xyChart": {"plotColorPalette": f"{LOST}, {GAINED}, {KEPT}"}},
    }
    return [
        "```mermaid",
        f"%%{{init: {json.dumps(init)}}}%%",
        "xychart-beta horizontal",
        '    title "Delivered before → after (grey: kept, red: lost, green: gained)"',
        "    x-axis [" + ", ".join(f'"{label}"' for label in labels) + "]",
        f'    y-axis "sampled messages" 0 --> {top}',
        "    %% before: what it delivered; the part not covered by 'kept' is lost",
        f"    bar {_values(before)}",
        "    %% after: what it will deliver; the part not covered by 'kept' is gained",
        f"    bar {_values(after)}",
        "    %% kept: delivered before and after, drawn over both",
        f"    bar {_values(kept)}",
        "```",
    ]


def _labels(m: SubscriptionImpact) -> tuple[str, str]:
    name = _fit(m.path.replace('"', "'"))
    change = " / ".join(part for part in (f"+{m.gained:,}" if m.gained else "", f"-{m.lost:,}" if m.lost else "") if part)
    return f"{name} before: {m.delivered_before:,}", f"{name} after: {m.delivered:,} ({change})"


def _fit(name: str) -> str:
    """Long names keep their end (the subscription), which tells them apart."""
    return name if len(name) <= LABEL_WIDTH else "…" + name[-(LABEL_WIDTH - 1) :]


def _unique(labels: list[str]) -> list[str]:
    """Mermaid's category axis merges equal labels; shortened names may collide."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


def _values(values: list[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"
