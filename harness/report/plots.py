"""Pictures for reports (matplotlib, Agg backend, PNG bytes): per-shape bars with 95 % error bars across runs,
and a roofline placing every shape by arithmetic intensity.

matplotlib is imported inside each function, so importing this module (and harness.report.sections) works without it;
``available()`` says whether pictures can be drawn. Everything here is drawn from numbers the caller passes:
no store, no GPU.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Sequence

from harness.hardware import GpuPeaks

#: Figure resolution, dots per inch (PNG); 100 keeps an 11-inch-wide figure at 1100 px, sharp in a browser.
DPI = 100
#: Colours for successive series (matplotlib's tab10, colour-blind friendlier than the default cycle order).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
#: Roofline shape labels closer than this fraction of the (log) x axis's width share one label ("3, 5"):
#: about two heights of the 8-point label font on the 12-inch-wide figure.
LABEL_GAP = 0.022


def available() -> bool:
    """True when matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Bar:
    """One bar: a series' mean time on one shape (us) and its 95 % interval (us); ``None`` mean: no result
    (drawn as a gap with the status written in)."""

    mean_us: float | None
    low_us: float | None = None
    high_us: float | None = None
    note: str = ""


@dataclass(frozen=True)
class RoofPoint:
    """A measured point on the roofline: ``intensity`` FLOP/byte, ``tflops`` achieved TFLOP/s."""

    series: str
    shape: str
    intensity: float
    tflops: float


def _pyplot():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt
    plt.close(fig)
    return buf.getvalue()


def _short(x: float) -> str:
    """A bar label: 3-4 significant digits without scientific notation."""
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


#: Above this ratio between the largest and the smallest bar of a panel, the panel's y axis is logarithmic
#: (a baseline 50x slower would otherwise flatten every other bar).
LOG_SPREAD = 20.0


def shape_bars_png(shapes: Sequence[str], series: Sequence[str], bars: Sequence[Sequence[Bar]],
                   sol_us: Sequence[float | None] | None = None, sol_label: str = "SOL") -> bytes:
    """Small multiples, one panel per shape (each with its own y axis, since shapes differ by 10x and more):
    one bar per series with its 95 % interval as an error bar, the mean written on the bar; a dashed line at
    the shape's speed-of-light time when ``sol_us`` gives one. A panel whose bars span more than LOG_SPREAD
    uses a log axis. ``bars[i][j]`` is series j on shape i, times in us. Returns PNG bytes.

    Raises ValueError when the dimensions disagree. Needs matplotlib (ImportError otherwise)."""
    if len(bars) != len(shapes) or any(len(row) != len(series) for row in bars):
        raise ValueError(f"bars must be {len(shapes)} shapes x {len(series)} series")
    if sol_us is not None and len(sol_us) != len(shapes):
        raise ValueError(f"sol_us must have one entry per shape ({len(shapes)}), got {len(sol_us)}")
    plt = _pyplot()
    n = max(1, len(shapes))
    cols = 1 if n == 1 else 2 if n <= 4 else 3
    rows = math.ceil(n / cols)
    panel_w = max(4.8, 0.85 * len(series) + 1.6)
    fig, axes = plt.subplots(rows, cols, figsize=(min(panel_w * cols, 17.0), 3.9 * rows + 0.8), squeeze=False)
    for i, shape in enumerate(shapes):
        ax = axes[i // cols][i % cols]
        values = [b.mean_us for b in bars[i] if b.mean_us is not None and b.mean_us > 0]
        sol = sol_us[i] if sol_us is not None else None
        span = values + ([sol] if sol else [])
        log = bool(span) and max(span) / min(span) > LOG_SPREAD
        if log:
            ax.set_yscale("log")
        floor = min(span) / 2.5 if log else 0.0
        top = max(span) if span else 1.0
        for j, bar in enumerate(bars[i]):
            colour = COLOURS[j % len(COLOURS)]
            if bar.mean_us is None:
                ax.text(j, 0.04, bar.note or "no result", rotation=90, ha="center", va="bottom", fontsize=10,
                        fontweight="bold", color="#b00020", transform=ax.get_xaxis_transform())
                continue
            yerr = None
            if bar.low_us is not None and bar.high_us is not None and math.isfinite(bar.high_us):
                yerr = [[bar.mean_us - max(bar.low_us, floor * 1.0001 if log else 0.0)],
                        [bar.high_us - bar.mean_us]]
                top = max(top, bar.high_us)
            ax.bar(j, bar.mean_us - floor, bottom=floor, color=colour, yerr=yerr, capsize=4, ecolor="#222222",
                   width=0.7)
            ax.annotate(_short(bar.mean_us), (j, bar.high_us if yerr else bar.mean_us), textcoords="offset points",
                        xytext=(0, 3), ha="center", va="bottom", fontsize=9)
        if sol:
            ax.axhline(sol, color="#333333", linestyle="--", linewidth=1.2)
        ax.set_xlim(-0.6, len(series) - 0.4)
        ax.set_ylim(floor if log else 0.0, top * (2.2 if log else 1.15))
        title = shape if not sol else f"{shape}  ({sol_label} {_short(sol)} us)"
        ax.set_title(title, fontsize=10)
        ax.set_xticks(list(range(len(series))))
        rotate = len(series) > 3 or max(len(s) for s in series) > 14
        ax.set_xticklabels(series, rotation=25 if rotate else 0, ha="right" if rotate else "center", fontsize=9)
        ax.set_ylabel("us per call" + (" (log scale)" if log else ""), fontsize=9)
        ax.tick_params(axis="y", labelsize=9)
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.set_axisbelow(True)
    for k in range(len(shapes), rows * cols):
        axes[k // cols][k % cols].axis("off")
    note = f"; dashed line: {sol_label}" if sol_us is not None and any(sol_us) else ""
    fig.suptitle(f"Mean time per call for each shape, lower is better (error bars: 95 % CI of the mean{note})",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    return _png(fig)


def label_clusters(shape_intensity: Sequence[tuple[str, float]], lo: float, hi: float, named: bool
                   ) -> list[tuple[float, str]]:
    """Where to write the shapes' labels above a log x axis from ``lo`` to ``hi`` (FLOP/byte): shapes closer
    than LABEL_GAP of the axis's width share one label at their geometric-mean intensity, so labels sit in one
    row and never stack. A label is the shapes' names (``named``) or numbers from 1, joined by ", ", in order
    of intensity. Returns (intensity, label) pairs, left to right."""
    span = math.log(hi / lo)
    order = sorted(range(len(shape_intensity)), key=lambda i: shape_intensity[i][1])
    clusters: list[list[int]] = []
    for i in order:
        x = shape_intensity[i][1]
        if clusters and math.log(x / shape_intensity[clusters[-1][0]][1]) / span < LABEL_GAP:
            clusters[-1].append(i)
        else:
            clusters.append([i])
    out = []
    for members in clusters:
        x = math.exp(sum(math.log(shape_intensity[i][1]) for i in members) / len(members))
        out.append((x, ", ".join(shape_intensity[i][0] if named else str(i + 1) for i in members)))
    return out


def roofline_png(peaks: Sequence[GpuPeaks], points: Sequence[RoofPoint],
                 shape_intensity: Sequence[tuple[str, float]] = ()) -> bytes:
    """Log-log roofline: for each GPU model in ``peaks`` (reports pass the GPUs the runs were timed on) a solid
    roof min(exact-MMA peak, intensity x HBM bandwidth) and a dotted line at its fastest-MMA peak when higher;
    measured points (TFLOP/s at the shape's FLOP/byte), one marker per series; a thin vertical line per shape
    in ``shape_intensity``, labelled as ``label_clusters`` places them. Returns PNG bytes.

    Needs matplotlib (ImportError otherwise)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(12.0, 6.4))
    xs = [p.intensity for p in points] + [x for _, x in shape_intensity]
    ridges = [pk.exact_tflops / pk.hbm_tbps for pk in peaks]
    lo = min(xs + ridges or [1.0]) / 3
    hi = max(xs + ridges or [1e3]) * 3
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    roof_colours = ("#111111", "#6a3d9a", "#b15928", "#33a02c")
    for idx, pk in enumerate(peaks):
        c = roof_colours[idx % len(roof_colours)]
        ax.plot(grid, [min(pk.exact_tflops, x * pk.hbm_tbps) for x in grid], color=c, linewidth=1.8,
                label=f"{pk.model} roof: {pk.exact_tflops:g} TFLOP/s exact MMA, {pk.hbm_tbps:g} TB/s")
        if pk.floor_tflops > pk.exact_tflops:
            ax.plot(grid, [min(pk.floor_tflops, x * pk.hbm_tbps) for x in grid], color=c, linewidth=1,
                    linestyle=":", label=f"{pk.model} fastest MMA (any precision): {pk.floor_tflops:g} TFLOP/s")
        ridge = pk.exact_tflops / pk.hbm_tbps
        ax.annotate(f"{pk.model} ridge {ridge:.0f} FLOP/B", (ridge, pk.exact_tflops), textcoords="offset points",
                    xytext=(4, 4), fontsize=8, color=c)
    # Shapes: their own names when short and few, else numbers with a key beside the plot; one label per
    # cluster of nearby shapes (label_clusters), written upright above the axes in a single row.
    named = len(shape_intensity) <= 8 and all(len(name) <= 16 for name, _ in shape_intensity)
    for _, x in shape_intensity:
        ax.axvline(x, color="#999999", linewidth=0.6, alpha=0.6)
    labels = label_clusters(shape_intensity, lo, hi, named)
    for x, text in labels:
        ax.text(x, 1.02, text, rotation=90, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                fontsize=8, color="#333333")
    if shape_intensity and not named:
        key = "\n".join(f"{i + 1}: {name} ({x:.0f} FLOP/B)" for i, (name, x) in enumerate(shape_intensity))
        ax.text(1.02, 1.0, "shapes\n" + key, transform=ax.transAxes, va="top", ha="left", fontsize=8,
                family="monospace", color="#333333")
    series = list(dict.fromkeys(p.series for p in points))
    for j, s in enumerate(series):
        pts = [p for p in points if p.series == s]
        ax.scatter([p.intensity for p in pts], [p.tflops for p in pts], color=COLOURS[j % len(COLOURS)],
                   marker=MARKERS[j % len(MARKERS)], s=46, zorder=3, edgecolors="white", linewidths=0.6,
                   label=f"measured: {s}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved once)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(which="both", alpha=0.25)
    pad = 5.2 * max((len(text) for _, text in labels), default=0) + 14
    ax.set_title("Roofline: each shape at its arithmetic intensity (vertical lines), roofs per GPU model",
                 fontsize=10, pad=pad if shape_intensity else 6)
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    fig.tight_layout()
    return _png(fig)
