#!/usr/bin/env python3
"""How much recsys could run beside the LC on a run-to-end (fifo) device, whatever the policy.

Usage: fifo_bound.py DIR   (DIR: a `gpuqos-bench qos` results folder with the fifo device mode)

recsys's longest kernel (97 ms at time scale 4) cannot be preempted once started: a query arriving
while it runs waits for its end. This models the fifo cells to bound what any scheduler that cannot
see future arrivals can give recsys while the LC's p99 stays under the cell's target:
- the LC: open-loop Poisson queries at the cell's rate, served one at a time; each is host time
  (the closed-loop mean latency less its device work) with its device work (the BERT trace's busy
  time) at its end, which waits for a recsys kernel running then (the query syncs once, at its end);
- recsys: one longest kernel per iteration, started only while no query is in the system (one
  started beside a query delays it for sure, and Poisson arrivals make every idle instant alike),
  at least `gap` after the previous one ended (the first, `gap` after the start); the gap is the
  smallest (the rate the largest) whose simulated p99 meets the target, found by bisection.
Everything else is left out, and all of it only lowers the bound: ResNet-50's kernels and
recsys's other ones (two more are over the 20-ms backlog bound) also delay queries, and recsys
needs more than one kernel per iteration. So, within the model's simplifications (one policy family,
one seeded 4000-s run: a few percent of sampling noise), recsys can make about `bound` of its
standalone rate at most, and the mix's `BE % of ideal` (the mean of the two jobs' fractions over
1 - LC busy) is at most (1 + bound) / 2 over it, with ResNet-50 at its standalone rate.
A benchmark cell is not a 4000-s run: its p99 is the fifth-worst of about 470 queries, which a
single kernel meeting a burst of arrivals decides. So a second bound asks more: the rate at which
at least 90 % of the runs' consecutive stretches of a cell's queries (the baymax cell's count, else
450) keep their own p99 within the target, as a policy must for the cell to pass run after run.
Prints one row per fifo load; the same seed gives the same numbers. A load whose LC misses its
target even with no kernel at all gets a rate of 0. A load whose standalone LC run failed (or gave
no rate, target or idle time) has a row saying so; without the calibration or recsys alone, one line
says why there is no bound.
"""
import json
import math
import os
import random
import sys


def simulate(rate_per_s, host_ms, device_ms, kernel_ms, gap_ms, seconds, seed):
    """LC latencies (ms, in arrival order) and recsys kernels started, for one gap."""
    rnd = random.Random(seed)
    latencies, kernels = [], 0
    lc_free = device_free = last_end = 0.0
    t = 0.0
    while t < seconds * 1000.0:
        t += rnd.expovariate(rate_per_s / 1000.0)
        start = max(lc_free, device_free, last_end + gap_ms)
        while start < t:  # the LC is idle until t: kernels go back to back, gap apart
            kernels += 1
            device_free = last_end = start + kernel_ms
            start = max(device_free, last_end + gap_ms)
        begin = max(t, lc_free)
        lc_free = max(begin + host_ms, device_free) + device_ms
        latencies.append(lc_free - t)
    return latencies, kernels


def p99(latencies):
    """Nearest rank, as benchmarks/replay/measurements.cpp takes it."""
    ordered = sorted(latencies)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def cells_meeting(latencies, target_ms, cell_queries):
    """The share of the run's consecutive stretches of cell_queries queries whose own p99 is within target_ms."""
    cells = [latencies[i:i + cell_queries] for i in range(0, len(latencies) - cell_queries + 1, cell_queries)]
    if not cells:
        return 1.0 if p99(latencies) <= target_ms else 0.0
    return sum(p99(cell) <= target_ms for cell in cells) / len(cells)


def best_rate(rate_per_s, target_ms, host_ms, device_ms, kernel_ms, seconds=4000, seed=1, cell_queries=None,
              confidence=0.9):
    """The most kernels per second whose simulated p99 stays within target_ms (bisection on the gap), and
    that p99. With cell_queries: whose stretches of that many queries keep their own p99 within it in at
    least `confidence` of them."""
    def meets(latencies):
        if cell_queries is None:
            return p99(latencies) <= target_ms
        return cells_meeting(latencies, target_ms, cell_queries) >= confidence

    low, high = 0.0, seconds * 1000.0  # gap ms: 0 may miss; the whole run: no kernel at all
    latencies, _ = simulate(rate_per_s, host_ms, device_ms, kernel_ms, high, seconds, seed)
    if not meets(latencies):
        return 0.0, p99(latencies)  # the LC misses on its own
    latencies, _ = simulate(rate_per_s, host_ms, device_ms, kernel_ms, low, seconds, seed)
    if meets(latencies):
        high = low
    for _ in range(40):
        if high - low < 1.0:
            break
        mid = (low + high) / 2
        latencies, _ = simulate(rate_per_s, host_ms, device_ms, kernel_ms, mid, seconds, seed)
        if meets(latencies):
            high = mid
        else:
            low = mid
    latencies, kernels = simulate(rate_per_s, host_ms, device_ms, kernel_ms, high, seconds, seed)
    return kernels / seconds, p99(latencies)


def table_text(text):
    """`text` as one markdown table cell: a reason may quote a log, with '|' and line breaks."""
    return " ".join(str(text).replace("|", "\\|").split())


def unusable(record, what, *keys):
    """Why `record` (a qos.json standalone record) gives no figures to divide by; None when it does. A
    failed run has null figures (zeros in an older qos.json): either is no reference."""
    if record is None:
        return f"{what} was not run"
    if record.get("status", "ok") != "ok":
        return f"{what} failed: {record.get('reason', '')}"
    for key in keys:
        if not isinstance(record.get(key), (int, float)) or record[key] <= 0:
            return f"{what} has no {key}"
    return None


def bound_table(results, device_ms, kernel_ms, seconds=4000):
    """The table's lines for the fifo loads of `results` (qos.json). A load whose references cannot give a
    bound (a failed or missing run, a zero or null figure) has a row saying so instead of numbers; without
    the calibration or recsys alone there is one line saying so and no table."""
    scale = results["config"]["time_scale"]
    standalone = results["standalone"]
    calibration = next((s for s in standalone if s["kind"] == "lc_calibration" and s["device_mode"] == "fifo"), None)
    recsys = next((s for s in standalone
                   if s["kind"] == "be" and s["job"] == "recsys-train" and s["device_mode"] == "fifo"), None)
    why = (unusable(calibration, "the LC's closed-loop calibration (fifo)", "lc_mean_ms")
           or unusable(recsys, "recsys alone (fifo)", "iterations_per_s"))
    if why:
        return [f"No bound: {table_text(why)}."]
    host_ms = calibration["lc_mean_ms"] - device_ms
    lines = [f"LC query: {host_ms:.2f} ms host, then {device_ms:.2f} ms device; recsys's longest kernel {kernel_ms:.1f} ms; "
             f"recsys alone {recsys['iterations_per_s']:.2f} it/s (time scale {scale:g})",
             "| lc_load | rate (/s) | target (ms) | recsys kernels/s at most | recsys % of standalone at most | "
             "simulated p99 (ms) | mix BE % of ideal at most | cell queries | recsys % at most, 90 % of cells | "
             "mix BE % of ideal at most, 90 % of cells | baymax measured |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for lc in sorted((s for s in standalone if s["kind"] == "lc" and s["device_mode"] == "fifo"), key=lambda s: s["lc_load"]):
        why = unusable(lc, "the LC alone at this load", "rate_per_s", "target_ms")
        if why is None and not (isinstance(lc.get("lc_gpu_busy_fraction"), (int, float)) and lc["lc_gpu_busy_fraction"] < 1):
            why = "the LC alone at this load left the GPU no idle time"
        if why:
            lines.append(f"| {lc['lc_load']:.2f} | skipped: {table_text(why)} |" + " |" * 9)
            continue
        cell = next((c for c in results["cells"]
                     if c["policy"] == "baymax" and c["device_mode"] == "fifo" and c["lc_load"] == lc["lc_load"]
                     and c["be_mix"] == "resnet+recsys" and c.get("status") == "ok"), None)
        cell_queries = cell["lc_queries"] if cell and cell.get("lc_queries") else 450
        row = [f"{lc['lc_load']:.2f}", f"{lc['rate_per_s']:.1f}", f"{lc['target_ms']:.2f}"]
        for stretch in (None, cell_queries):
            rate, p99_ms = best_rate(lc["rate_per_s"], lc["target_ms"], host_ms, device_ms, kernel_ms,
                                     seconds=seconds, cell_queries=stretch)
            bound = min(1.0, rate / recsys["iterations_per_s"])
            ideal = (1 + bound) / 2 / (1 - lc["lc_gpu_busy_fraction"])
            if stretch is None:
                row += [f"{rate:.2f}", f"{100 * bound:.0f} %", f"{p99_ms:.1f}", f"{100 * ideal:.0f} %"]
            else:
                row += [str(stretch), f"{100 * bound:.0f} %", f"{100 * ideal:.0f} %"]
        measured = cell.get("be_fraction_of_ideal") if cell else None
        row.append("n/a" if measured is None else f"{100 * measured:.0f} %")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    with open(os.path.join(out, "qos.json")) as f:
        results = json.load(f)
    scale = results["config"]["time_scale"]
    workloads = {}
    for name in ("bert", "recsys"):
        with open(os.path.join(out, "workloads", name + ".json")) as f:
            workloads[name] = json.load(f)
    device_ms = workloads["bert"]["busy_ns"] / len(workloads["bert"]["iterations"]) * scale / 1e6
    kernel_ms = max(op["duration_ns"] for op in workloads["recsys"]["ops"] if op["kind"] == "kernel") * scale / 1e6
    print("\n".join(bound_table(results, device_ms, kernel_ms)))


if __name__ == "__main__":
    main()
