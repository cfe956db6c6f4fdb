#!/usr/bin/env python3
"""What the best-effort jobs had on the device while each slow LC request waited, read back from a
traced `gpuqos-bench qos` run.

Usage: trace_misses.py DIR [--worst N] [--cell NAME]
  DIR: a results folder run with `--daemon-log-level trace`, so that each cell's gpuqosd log
  (DIR/logs/<cell>-gpuqosd.log) holds every op, grant and completion.
  --worst N: the N slowest requests of each cell, whether over the target or not (default: only
  the requests over the target, which a passing cell has none of).
  --cell NAME: only that cell (for example baymax-fifo-0.20-resnet+recsys).

A request's window is the latency the LC recorded for it (DIR/runs/<cell>-<lc job>.json, from the
request's scheduled arrival), ending at its query_end mark, which the replayer posts just before it
reads the clock for that latency: the i-th mark ends the i-th request. A cell whose LC posted no
such marks (or lost some: the shim drops a mark when its ring is full) is said and skipped. For
each request in question it prints:
  - ahead: the LC's earlier requests still in the system when it arrived;
  - running at arrival: best-effort ops on the device at that moment, each as job (copies marked,
    with their direction, h2d, d2h or d2d, in logs that say it), length and what was left of it (on
    a run-to-end device a request's first kernel waits at least that long behind a kernel);
  - best-effort device time inside the window, per job: how long the job had an op on the device
    (the union of its ops' device spans, clipped to the window);
  - granted during the window: how many best-effort ops gpuqosd granted after the request arrived
    and before it was answered, and their expected device time (the predictor's, from the log).
Then, for the whole cell, where each best-effort job's time went with a request of the LC in the
system and with none: the share of each phase in which it had compute on the device, and in which
it had an op gpuqosd had read and not granted yet (its holds, of any reason, and when).
All times are the monotonic clock the shim stamps with, so the trace and the LC's latencies agree.
"""
import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field

QUERY_END = 6  # ipc::OpKind::query_end
COMPUTE_KINDS = {0, 3}  # kernel, graph (memsets and copies run on the copy engines, as gpuqosd counts them)
COPY_KIND = 1
MEMSET_KIND = 2
DIRECTIONS = {1: "h2d", 2: "d2h", 3: "d2d"}  # ipc::CopyDirection

# A job's name is any printable ASCII, quotes included: the tag ends at the last "' pid N: ".
_TAG = r"job '(?P<job>.*)' pid (?P<pid>\d+): "
POSTED = re.compile(_TAG + r"posted (?P<seq>\d+) kind (?P<kind>\d+) device \d+ stamp (?P<stamp>-?\d+) read (?P<read>-?\d+) "
                    r"expected (?P<expected>-?\d+) upper -?\d+(?: direction (?P<direction>\d+))?")
DONE = re.compile(_TAG + r"done (?P<seq>\d+) start (?P<start>-?\d+) end (?P<end>-?\d+)")
GRANTED = re.compile(_TAG + r"granted through (?P<seq>\d+) at (?P<at>-?\d+)")


@dataclass
class Op:
    job: str
    kind: int
    stamp_ns: int
    expected_ns: int
    read_ns: int = 0  # when gpuqosd read it
    direction: int = 0  # a copy's ipc::CopyDirection (0: not said, as in logs before 2026-11-29's)
    granted_ns: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None


@dataclass
class Trace:
    ops: list = field(default_factory=list)   # every GPU op (not marks), in log order
    ends: dict = field(default_factory=dict)  # job -> its query_end marks' stamps, in order


@dataclass
class Session:
    """One registration of a process: its seqs start at 1, and a shim that reconnects (same pid)
    starts a new one."""
    ops: dict = field(default_factory=dict)        # seq -> Op
    ungranted: list = field(default_factory=list)  # seqs posted and not granted yet, in order
    granted_through: int = 0
    last_seq: int = 0


def parse(lines):
    """Reads gpuqosd's trace lines."""
    trace = Trace()
    sessions = {}  # pid -> its current Session
    for line in lines:
        if " trace " not in line:
            continue
        if m := POSTED.search(line):
            pid, seq, kind, stamp = int(m["pid"]), int(m["seq"]), int(m["kind"]), int(m["stamp"])
            session = sessions.setdefault(pid, Session())
            if seq <= session.last_seq:  # seqs restarted: the process registered again
                session = sessions[pid] = Session()
            session.last_seq = seq
            if kind == QUERY_END:
                trace.ends.setdefault(m["job"], []).append(stamp)
            op = Op(m["job"], kind, stamp, int(m["expected"]), int(m["read"]), int(m["direction"] or 0))
            session.ops[seq] = op
            if seq <= session.granted_through:
                op.granted_ns = stamp  # on credit: granted before it was posted, issued without asking
            else:
                session.ungranted.append(seq)
            if kind in COMPUTE_KINDS or kind in (COPY_KIND, MEMSET_KIND):
                trace.ops.append(op)
        elif m := GRANTED.search(line):
            session = sessions.setdefault(int(m["pid"]), Session())
            through, at = int(m["seq"]), int(m["at"])
            session.granted_through = max(session.granted_through, through)
            waiting = session.ungranted
            done = 0
            while done < len(waiting) and waiting[done] <= through:
                session.ops[waiting[done]].granted_ns = at
                done += 1
            del waiting[:done]
        elif m := DONE.search(line):
            session = sessions.get(int(m["pid"]))
            op = session.ops.get(int(m["seq"])) if session else None
            if op is not None:
                op.start_ns, op.end_ns = int(m["start"]), int(m["end"])
    return trace


def merged(spans):
    """The union of (start, end) spans, as sorted disjoint spans."""
    out = []
    for start, end in sorted(spans):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def overlap(a, b):
    """How long two sets of sorted disjoint spans overlap."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def label(op):
    if op.kind in COMPUTE_KINDS:
        return op.job
    if op.kind == MEMSET_KIND:
        return f"{op.job} (memset)"
    direction = DIRECTIONS.get(op.direction)
    return f"{op.job} (copy {direction})" if direction else f"{op.job} (copy)"


def windows(trace, lc_job, latencies_ms):
    """Each request's arrival and answer (ns): its latency, ending at its query_end mark."""
    answered = trace.ends.get(lc_job, [])
    if len(answered) != len(latencies_ms) or not answered:
        raise ValueError(f"{lc_job} has {len(answered)} query_end marks in the trace and {len(latencies_ms)} "
                         "latencies: were its queries marked (and none dropped), and is this the run's own log?")
    return [end - round(latency * 1e6) for end, latency in zip(answered, latencies_ms)], answered


def device_spans(ops):
    """When any of `ops`' compute was on the device, as sorted disjoint spans."""
    return merged((op.start_ns, op.end_ns) for op in ops
                  if op.kind in COMPUTE_KINDS and op.start_ns is not None and op.end_ns is not None)


def explain(trace, lc_job, latencies_ms, picked):
    """One record per picked request index: what the best-effort jobs had while it waited."""
    arrived, answered = windows(trace, lc_job, latencies_ms)
    best_effort = [op for op in trace.ops if op.job != lc_job]
    on_device = {job: device_spans([op for op in best_effort if op.job == job])
                 for job in sorted({op.job for op in best_effort})}
    records = []
    for i in picked:
        begin, end = arrived[i], answered[i]
        running = [op for op in best_effort
                   if op.start_ns is not None and op.start_ns <= begin and (op.end_ns or 0) > begin]
        device = {job: ns for job, spans in on_device.items() if (ns := overlap(spans, [(begin, end)]))}
        granted = [op for op in best_effort if op.granted_ns is not None and begin <= op.granted_ns < end]
        records.append({
            "request": i,
            "arrived_s": (begin - arrived[0]) / 1e9,
            "latency_ms": latencies_ms[i],
            "ahead": sum(1 for j in range(i) if answered[j] > begin),
            "running": sorted(((label(op), (op.end_ns - op.start_ns) / 1e6, (op.end_ns - begin) / 1e6)
                               for op in running), key=lambda r: -r[2]),
            "device_ms": {job: ns / 1e6 for job, ns in device.items()},
            "granted": len(granted),
            "granted_expected_ms": sum(op.expected_ns for op in granted if op.kind in COMPUTE_KINDS) / 1e6,
        })
    return records


def pick(latencies_ms, target_ms, worst):
    """Indices of the requests over the target, or of the `worst` slowest (slowest first)."""
    order = sorted(range(len(latencies_ms)), key=lambda i: -latencies_ms[i])
    if worst:
        return order[:worst]
    return [i for i in order if latencies_ms[i] > target_ms]


def table(records, target_ms):
    rows = ["| request | arrived (s) | latency (ms) | × target | ahead | running at arrival (job: length, left ms) "
            "| BE device time in window (ms) | BE granted in window (ops, expected ms) |",
            "| ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for r in records:
        running = ", ".join(f"{job}: {length:.1f}, {left:.1f}" for job, length, left in r["running"]) or "-"
        device = ", ".join(f"{job} {ms:.1f}" for job, ms in r["device_ms"].items()) or "-"
        rows.append(f"| {r['request']} | {r['arrived_s']:.3f} | {r['latency_ms']:.1f} | "
                    f"{r['latency_ms'] / target_ms:.2f} | {r['ahead']} | {running} | {device} | "
                    f"{r['granted']}, {r['granted_expected_ms']:.1f} |")
    return "\n".join(rows)


def phases(trace, lc_job, latencies_ms):
    """Where each best-effort job's time went, from the LC's first arrival to its last answer: with
    a request of the LC in the system and without. Per job, in ms: its compute on the device and the
    time it had an op gpuqosd had read and not granted, in each phase; and each phase's
    length."""
    arrived, answered = windows(trace, lc_job, latencies_ms)
    busy = merged(zip(arrived, answered))
    idle = [(a[1], b[0]) for a, b in zip(busy, busy[1:])]
    out = {}
    for job in sorted({op.job for op in trace.ops if op.job != lc_job}):
        ops = [op for op in trace.ops if op.job == job]
        device = device_spans(ops)
        # From gpuqosd's read, so the ring's latency is not counted: a grant made as the op is read
        # takes microseconds, a hold as long as it lasts.
        held = merged((op.read_ns, answered[-1] if op.granted_ns is None else op.granted_ns) for op in ops)
        out[job] = {phase: {"device_ms": overlap(device, spans) / 1e6, "held_ms": overlap(held, spans) / 1e6}
                    for phase, spans in (("busy", busy), ("idle", idle))}
    return {"busy_ms": sum(e - b for b, e in busy) / 1e6, "idle_ms": sum(e - b for b, e in idle) / 1e6, "jobs": out}


def phase_table(where):
    def share(ms, of):
        return f"{100 * ms / of:.0f} %" if of > 0 else "-"
    rows = [f"LC requests in the system {share(where['busy_ms'], where['busy_ms'] + where['idle_ms'])} of the run "
            f"({where['busy_ms'] / 1e3:.1f} s; none: {where['idle_ms'] / 1e3:.1f} s). Each job's compute on the "
            "device, and time with an op gpuqosd had read and not yet granted, as a share of each:",
            "",
            "| job | LC in system: on device | LC in system: held | LC idle: on device | LC idle: held |",
            "| --- | ---: | ---: | ---: | ---: |"]
    for job, at in where["jobs"].items():
        rows.append(f"| {job} | {share(at['busy']['device_ms'], where['busy_ms'])} | "
                    f"{share(at['busy']['held_ms'], where['busy_ms'])} | {share(at['idle']['device_ms'], where['idle_ms'])} | "
                    f"{share(at['idle']['held_ms'], where['idle_ms'])} |")
    return "\n".join(rows)


def cell_name(cell):
    return f"{cell['policy']}-{cell['device_mode']}-{cell['lc_load']:.2f}-{cell['be_mix']}"


def lc_run(directory, name):
    """The cell's LC run record and job name: the runs file whose replayer ran in `lc` mode."""
    prefix = name + "-"
    for entry in sorted(os.listdir(os.path.join(directory, "runs"))):
        if entry.startswith(prefix) and entry.endswith(".json"):
            with open(os.path.join(directory, "runs", entry)) as f:
                run = json.load(f)
            if run.get("config", {}).get("mode") == "lc":
                return entry[len(prefix):-len(".json")], run
    return None, None


def report(directory, worst=0, only=None, out=sys.stdout):
    """Prints one table per traced cell; returns how many cells it read."""
    with open(os.path.join(directory, "qos.json")) as f:
        results = json.load(f)
    read = 0
    for cell in results["cells"]:
        name = cell_name(cell)
        if (only and name != only) or cell.get("status") != "ok":
            continue
        log = os.path.join(directory, "logs", f"{name}-gpuqosd.log")
        if not os.path.exists(log):
            continue  # `none` runs without gpuqosd
        with open(log, errors="replace") as f:
            trace = parse(f)
        lc_job, run = lc_run(directory, name)
        if not trace.ops or run is None:
            print(f"## {name}: no trace (run with --daemon-log-level trace)\n", file=out)
            continue
        target = cell["target_ms"]
        picked = pick(run["latency_ms"], target, worst)
        try:
            records = explain(trace, lc_job, run["latency_ms"], picked)
        except ValueError as e:
            print(f"## {name}: cannot pair its requests with the trace: {e}\n", file=out)
            continue
        read += 1
        over = sum(1 for latency in run["latency_ms"] if latency > target)
        print(f"## {name}: {over} of {len(run['latency_ms'])} requests over the {target:.1f}-ms target, "
              f"p99 {cell['lc_p99_ms']:.1f} ms\n", file=out)
        if picked:
            print(table(records, target) + "\n", file=out)
        print(phase_table(phases(trace, lc_job, run["latency_ms"])) + "\n", file=out)
    return read


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--worst", type=int, default=0, help="the N slowest requests of each cell")
    parser.add_argument("--cell", help="only this cell")
    args = parser.parse_args()
    try:
        read = report(args.dir, args.worst, args.cell)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"trace_misses.py: {args.dir}: {e}")
    if read == 0:
        sys.exit(f"trace_misses.py: {args.dir}: no traced cell it could read (run gpuqos-bench qos with "
                 "--daemon-log-level trace; any cell above says why it was skipped)")


if __name__ == "__main__":
    main()
