#!/usr/bin/env python3
"""Plots gpuqos-bench qos results: LC p99 over target and BE share of the ideal, per cell.

Usage: plot_qos.py DIR/qos.json   -> DIR/qos_p99_over_target.png, DIR/qos_be_fraction_of_ideal.png

gpuqos-bench runs it after writing qos.json. Exit code 2 means matplotlib is missing (gpuqos-bench
then tries another interpreter, or warns once and skips the plots).
"""
import json
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(2)


def groups_and_policies(cells):
    """Cell groups (device mode, load, mix) in run order, and the policies in run order."""
    groups, policies = [], []
    for c in cells:
        key = (c["device_mode"], c["lc_load"], c["be_mix"])
        if key not in groups:
            groups.append(key)
        if c["policy"] not in policies:
            policies.append(c["policy"])
    return groups, policies


def bar_chart(cells, value, ylabel, title, reference, path, interval=None):
    """interval(cell): (low, high) around value(cell), either None when the cell cannot give it. A cell
    whose value is None (a figure without its reference: null in qos.json) is marked "n/a", not drawn as 0."""
    groups, policies = groups_and_policies(cells)
    by_key = {(c["device_mode"], c["lc_load"], c["be_mix"], c["policy"]): c for c in cells}
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(min(16, max(7.5, 0.3 * len(groups) * len(policies) + 2)), 5))
    for i, policy in enumerate(policies):
        xs, ys, ends, failed_xs, missing_xs = [], [], [], [], []
        for g, group in enumerate(groups):
            cell = by_key.get(group + (policy,))
            x = g + (i - (len(policies) - 1) / 2) * width
            if cell is None:
                continue
            if cell["status"] != "ok":
                failed_xs.append(x)
                continue
            if value(cell) is None:
                missing_xs.append(x)
                continue
            xs.append(x)
            ys.append(value(cell))
            ends.append(interval(cell) if interval else (None, None))
        color = f"C{i}"  # one colour per policy, also for its "failed" marks
        ax.bar(xs, ys, width, label=policy, color=color)
        for x, y, (low, high) in zip(xs, ys, ends):
            if low is not None:  # the interval; with no upper end, up to the bar and a "^" above it
                ax.vlines(x, low, y if high is None else high, color="black", linewidth=1)
            if low is not None and high is None:
                ax.plot(x, y, marker="^", color="black", markersize=4)
        for x in failed_xs:
            ax.text(x, 0.02, "failed", rotation=90, ha="center", va="bottom", fontsize=8, color=color)
        for x in missing_xs:
            ax.text(x, 0.02, "n/a", rotation=90, ha="center", va="bottom", fontsize=8, color=color)
    ax.axhline(reference, color="black", linestyle="--", linewidth=1)
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{m}\nload {l:.2f}\n{b}" for m, l, b in groups], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(title="policy", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 1
    path = sys.argv[1]
    with open(path) as f:
        doc = json.load(f)
    cells = doc["cells"]
    out = os.path.dirname(os.path.abspath(path))
    scale = doc.get("config", {}).get("time_scale", 1)
    p99 = os.path.join(out, "qos_p99_over_target.png")
    be = os.path.join(out, "qos_be_fraction_of_ideal.png")
    def p99_interval(c):
        ends = c.get("lc_p99_ci95_ms") or [None, None]  # absent from an older qos.json
        return tuple(None if e is None or not c["target_ms"] else e / c["target_ms"] for e in ends)

    bar_chart(cells, lambda c: c["lc_p99_ms"] / c["target_ms"] if c["target_ms"] else None,
              "LC p99 / target", f"LC p99 / target (<= 1 meets it; simgpu time scale {scale})\n"
              "lines: the p99's 95 % interval; ^: no upper end from this few queries", 1.0, p99, p99_interval)
    bar_chart(cells, lambda c: c.get("be_fraction_of_ideal"), "BE fraction of ideal",
              "BE throughput / what the LC leaves idle (1 = all of it)", 1.0, be)
    print(f"wrote {p99}\nwrote {be}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
