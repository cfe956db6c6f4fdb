#!/usr/bin/env python3
"""How many of the LC's requests a long best-effort op makes miss on a run-to-end (fifo) device:
gpuqosd's estimate against a replay of the cell's own arrivals.

Usage: long_op_price.py DIR [--length-ms MS ...]
  DIR: a `gpuqos-bench qos` results folder with the fifo device mode. Default length: recsys's
  longest kernel at the run's time scale.

gpuqosd (BaymaxPolicy::blocking_cost_ns) takes the wait w each of the job's latest requests had in
its own queue (Lindley's recursion, every query its mean time `whole`), and counts an op of length p
as m = mean over the waits of max(0, (p + w + whole + margin - target) / (1 - load)) / gap requests
(a wait past the slack counts 0), load = whole / gap, at most 0.9; it then prices m + 2 sqrt(m)
requests (3 m below one) against the tail budget.

The replay takes the cell's arrivals (the replayer's seeded Poisson process, checked against the
LC's recorded latencies when run alone), starts the op at every moment the LC's queue is empty
(uniformly over its idle time, which is when a held long op may start), serves the queue behind it
with every query its mean time, and counts the requests that then miss their target less the margin
and would not have without the op. It prints that count's mean beside gpuqosd's m, its spread and
its tail, and the count gpuqosd prices.
"""
import argparse
import json
import math
import os
import sys
import tomllib

import fifo_bound

LONG_OP_MAX_LOAD = 0.9   # BaymaxPolicy::kLongOpMaxLoad
COUNT_SIGMAS = 2.0       # BaymaxPolicy::kLongOpCountSigmas
MASK = (1 << 64) - 1


def arrivals(rate_per_s, seed, count):
    """The replayer's arrival times (ms): the first at 0, then PoissonArrivals' gaps (splitmix64)."""
    state, t, out = seed, 0.0, []
    for _ in range(count):
        out.append(t)
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        t += -math.log1p(-(z >> 11) * 2.0 ** -53) / rate_per_s * 1000.0
    return out


def finishes(arrived, service):
    """Each request's finish, served one at a time in arrival order (service: one time or a list)."""
    out, free = [], -math.inf
    for i, a in enumerate(arrived):
        free = max(a, free) + (service[i] if isinstance(service, list) else service)
        out.append(free)
    return out


def gpuqosd_count(arrived, whole, target, margin, length):
    """gpuqosd's expected count m, or None when every request was past saving (it prices the bound)."""
    gap = (arrived[-1] - arrived[0]) / (len(arrived) - 1)
    load = min(LONG_OP_MAX_LOAD, whole / gap)
    slack = target - whole - margin
    waits = [f - whole - a for f, a in zip(finishes(arrived, whole), arrived)]
    savable = [w for w in waits if w <= slack]
    if not savable or slack < 0:
        return None
    window = sum(max(0.0, length - slack + w) for w in savable) / len(waits) / (1 - load)
    return window / gap


def priced_count(m):
    """The count the budget is charged for an expected count m."""
    return m + COUNT_SIGMAS * min(math.sqrt(m), m)


def replay_counts(arrived, whole, deadline, length, steps=32):
    """(count, weight) for op starts spread evenly over each idle period of the LC's queue, weighted
    by the time they stand for: how many requests miss `deadline` (response time) for the op. Idle
    periods whose effect runs past the last arrival, and the one before the first, are left out."""
    done = finishes(arrived, whole)
    samples = []
    for k in range(1, len(arrived)):
        idle = arrived[k] - done[k - 1]
        if idle <= 0:
            continue
        counts = []
        for step in range(steps):
            end = done[k - 1] + idle * (step + 0.5) / steps + length  # the op's end
            count, j = 0, k
            # With the op, request j finishes at max(done[j], end + (j - k + 1) whole): once that is
            # done[j], every later one is as without it.
            while j < len(arrived) and end + (j - k + 1) * whole > done[j]:
                if done[j] - arrived[j] <= deadline < end + (j - k + 1) * whole - arrived[j]:
                    count += 1
                j += 1
            if j == len(arrived):
                break
            counts.append(count)
        else:
            samples.extend((c, idle / steps) for c in counts)
    return samples


def summary(samples):
    """Mean, standard deviation and the 95th and 99th percentiles (by weight) of the counts, and the most."""
    total = sum(w for _, w in samples)
    mean = sum(c * w for c, w in samples) / total
    sd = math.sqrt(sum(w * (c - mean) ** 2 for c, w in samples) / total)
    quantiles, acc = {}, 0.0
    for c, w in sorted(samples):
        acc += w / total
        for q in (0.95, 0.99):
            if q not in quantiles and acc >= q - 1e-12:
                quantiles[q] = c
    return mean, sd, quantiles[0.95], quantiles[0.99], max(c for c, _ in samples)


def job_margin(config_path, job):
    with open(config_path, "rb") as f:
        config = tomllib.load(f)
    for entry in config.get("job", []):
        if entry.get("name") == job and "safety_margin_ms" in entry:
            return entry["safety_margin_ms"]
    return config["policy"]["baymax"]["safety_margin_ms"]


def price_table(directory, lengths):
    """The table's lines for the fifo loads of DIR's qos.json. A load whose LC reference failed, has no
    target or rate (null in qos.json), or whose run file is missing has a row saying so instead."""
    with open(os.path.join(directory, "qos.json")) as f:
        results = json.load(f)
    if not lengths:
        with open(os.path.join(directory, "workloads", "recsys.json")) as f:
            recsys = json.load(f)
        scale = results["config"]["time_scale"]
        lengths = [max(op["duration_ns"] for op in recsys["ops"] if op["kind"] == "kernel") * scale / 1e6]
    lines = ["| lc_load | target (ms) | whole (ms) | arrivals off by (ms) | op (ms) | gpuqosd m | replay mean | "
             "replay sd | replay p95 | replay p99 | replay max | gpuqosd prices |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for lc in sorted((s for s in results["standalone"] if s["kind"] == "lc" and s["device_mode"] == "fifo"),
                     key=lambda s: s["lc_load"]):
        load = f"{lc['lc_load']:.2f}"
        why = fifo_bound.unusable(lc, "the LC alone at this load", "rate_per_s", "target_ms")
        run_path = os.path.join(directory, "runs", f"alone-fifo-lc-{load}-bert-infer.json")
        config_path = os.path.join(directory, "configs", f"baymax-fifo-{load}-resnet+recsys.toml")
        for path in (run_path, config_path):
            if why is None and not os.path.exists(path):
                why = f"{os.path.relpath(path, directory)} is missing"
        if why:
            lines.append(f"| {load} | skipped: {fifo_bound.table_text(why)} |" + " |" * 10)
            continue
        with open(run_path) as f:
            run = json.load(f)
        arrived = arrivals(run["config"]["rate_per_s"], run["config"]["seed"], len(run["latency_ms"]))
        off = max(abs(f - a - latency) for f, a, latency in
                  zip(finishes(arrived, run["service_ms"]), arrived, run["latency_ms"]))
        whole = sum(run["service_ms"]) / len(run["service_ms"])
        margin = job_margin(config_path, "bert-infer")
        target = lc["target_ms"]
        for length in lengths:
            m = gpuqosd_count(arrived, whole, target, margin, length)
            mean, sd, p95, p99, most = summary(replay_counts(arrived, whole, target - margin, length))
            gpuqosd = "bound" if m is None else f"{m:.2f}"
            priced = "bound" if m is None else f"{priced_count(m):.2f}"
            lines.append(f"| {load} | {target:.1f} | {whole:.1f} | {off:.1f} | {length:.1f} | {gpuqosd} | {mean:.2f} | "
                         f"{sd:.2f} | {p95} | {p99} | {most} | {priced} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--length-ms", type=float, action="append", help="the op's length (repeatable)")
    args = parser.parse_args()
    try:
        print("\n".join(price_table(args.dir, args.length_ms)))
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"long_op_price.py: {args.dir}: {e}")


if __name__ == "__main__":
    main()
