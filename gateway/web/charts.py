"""Chart geometry for server-rendered SVG: numbers in, shapes out.

Pure functions; the templates draw the shapes (so every label passes through
autoescaping, and the page needs no script and no inline style: SVG
presentation attributes and CSS classes only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

WIDTH = 720
HEIGHT = 200
PAD_LEFT = 44
PAD_RIGHT = 12
PAD_TOP = 12
PAD_BOTTOM = 26
MAX_X_LABELS = 8


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass
class Chart:
    width: int
    height: int
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float
    bars: list[Bar] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    line: str = ""  # polyline points
    dots: list[Bar] = field(default_factory=list)  # x, y as the centre; title for hover
    legend: list[tuple[str, str]] = field(default_factory=list)  # (css, name)
    empty: bool = False


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `value`."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def _frame(labels: list[str], top_value: float, percent: bool, width: int, height: int) -> Chart:
    chart = Chart(
        width=width,
        height=height,
        plot_left=PAD_LEFT,
        plot_right=width - PAD_RIGHT,
        plot_top=PAD_TOP,
        plot_bottom=height - PAD_BOTTOM,
    )
    span = chart.plot_bottom - chart.plot_top
    for fraction in (0.0, 0.5, 1.0):
        value = top_value * fraction
        label = f"{value * 100:.0f}%" if percent else (f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}")
        chart.y_ticks.append(Tick(position=round(chart.plot_bottom - span * fraction, 2), label=label))
    step = max(1, math.ceil(len(labels) / MAX_X_LABELS))
    slot = (chart.plot_right - chart.plot_left) / max(1, len(labels))
    for index in range(0, len(labels), step):
        chart.x_ticks.append(Tick(position=round(chart.plot_left + slot * (index + 0.5), 2), label=labels[index][5:]))
    return chart


def bar_chart(
    labels: list[str], series: list[tuple[str, str, list[int]]], *, width: int = WIDTH, height: int = HEIGHT
) -> Chart:
    """Grouped bars: one group per label, one bar per series (css, name, values).

    Draw it about `width` pixels wide: the SVG scales, and so would its text."""
    top = nice_ceiling(max([v for _, _, values in series for v in values] or [0]))
    chart = _frame(labels, top, False, width, height)
    chart.legend = [(css, name) for css, name, _ in series]
    chart.empty = all(v == 0 for _, _, values in series for v in values)
    slot = (chart.plot_right - chart.plot_left) / max(1, len(labels))
    inner = slot * 0.8
    bar_width = inner / max(1, len(series))
    span = chart.plot_bottom - chart.plot_top
    for index, label in enumerate(labels):
        for number, (css, name, values) in enumerate(series):
            value = values[index]
            bar_height = span * value / top
            x = chart.plot_left + slot * index + (slot - inner) / 2 + bar_width * number
            chart.bars.append(
                Bar(
                    x=round(x, 2),
                    y=round(chart.plot_bottom - bar_height, 2),
                    width=round(max(bar_width - 1, 1), 2),
                    height=round(bar_height, 2),
                    css=css,
                    title=f"{label}: {value} {name}",
                )
            )
    return chart


def rate_chart(
    labels: list[str], rates: list[float | None], css: str = "rate", *, width: int = WIDTH, height: int = HEIGHT
) -> Chart:
    """A line of rates from 0 to 100 %, skipping days that have no rate."""
    chart = _frame(labels, 1.0, True, width, height)
    chart.legend = [(css, "use rate")]
    chart.empty = all(r is None for r in rates)
    slot = (chart.plot_right - chart.plot_left) / max(1, len(labels))
    span = chart.plot_bottom - chart.plot_top
    points = []
    for index, (label, value) in enumerate(zip(labels, rates)):
        if value is None:
            continue
        x = round(chart.plot_left + slot * (index + 0.5), 2)
        y = round(chart.plot_bottom - span * min(max(value, 0.0), 1.0), 2)
        points.append(f"{x},{y}")
        chart.dots.append(Bar(x=x, y=y, width=0, height=0, css=css, title=f"{label}: {value * 100:.0f}% used"))
    chart.line = " ".join(points)
    return chart


def meter(value: int, top: int, width: int = 80) -> float:
    """The length of a horizontal bar for `value` out of `top`."""
    if top <= 0:
        return 0.0
    return round(width * min(value, top) / top, 1)
