"""Tests of benchmarks/qos/trace_misses.py: a traced cell's slow requests, against what gpuqosd logged."""
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(__file__)
SCRIPT = os.path.join(HERE, "..", "..", "benchmarks", "qos", "trace_misses.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import trace_misses as tm  # noqa: E402

MS = 1_000_000
LC = "job 'bert-infer' pid 10: "
RESNET = "job 'resnet-train' pid 20: "
RECSYS = "job 'recsys-train' pid 30: "


def posted(tag, seq, kind, stamp_ms, expected_ms=0.0, direction=0):
    """gpuqosd's line; direction None: as written before it said copies' directions."""
    line = (f"2026-11-29 11:52:22.279 trace {tag}posted {seq} kind {kind} device 0 stamp {int(stamp_ms * MS)} "
            f"read {int(stamp_ms * MS) + 5000} expected {int(expected_ms * MS)} upper {int(expected_ms * MS)}")
    return line if direction is None else f"{line} direction {direction}"


def granted(tag, through, at_ms):
    return f"2026-11-29 11:52:22.280 trace {tag}granted through {through} at {int(at_ms * MS)}"


def done(tag, seq, start_ms, end_ms):
    return (f"2026-11-29 11:52:22.281 trace {tag}done {seq} start {int(start_ms * MS)} end {int(end_ms * MS)} "
            f"read {int(end_ms * MS) + 9000}")


# The LC's requests arrive at 1000, 1050 and 1060 ms (latencies 20, 45 and 40 ms, so their
# query_end marks at 1020, 1095 and 1100; arrival marks are posted too, and not used). recsys's 30-ms
# kernel runs 1040-1070 ms, granted at 1039; resnet's two 4-ms kernels were granted at 1052 and run
# side by side, 1053-1057 and 1055-1059 (6 ms of device time in all); a copy of resnet's is granted
# at 1054 and runs 1059-1061 (not compute).
LOG = [
    "2026-11-29 11:52:22.201 info config /tmp/x.toml",
    posted(LC, 1, 7, 1000.0),
    posted(LC, 2, 0, 1000.1, 0.5),
    granted(LC, 2, 1000.1),
    done(LC, 2, 1000.2, 1000.7),
    posted(LC, 3, 6, 1020.0),
    posted(RECSYS, 1, 0, 1030.0, 29.0),
    granted(RECSYS, 1, 1039.0),
    done(RECSYS, 1, 1040.0, 1070.0),
    posted(LC, 4, 7, 1050.0),
    posted(RESNET, 5, 0, 1051.0, 4.0),
    posted(RESNET, 6, 0, 1051.5, 4.0),
    posted(RESNET, 7, 1, 1051.6, 2.0, direction=1),
    granted(RESNET, 6, 1052.0),
    granted(RESNET, 7, 1054.0),
    done(RESNET, 5, 1053.0, 1057.0),
    done(RESNET, 6, 1055.0, 1059.0),
    done(RESNET, 7, 1059.0, 1061.0),
    posted(LC, 5, 7, 1060.0),
    posted(LC, 6, 6, 1095.0),
    posted(LC, 7, 6, 1100.0),
    "2026-11-29 11:52:22.300 debug job 'resnet-train' pid 20: kernel 1 is gq_0_conv",
]
LATENCIES = [20.0, 45.0, 40.0]


class Parse(unittest.TestCase):
    def test_query_ends_are_kept_and_only_gpu_ops_are_ops(self):
        trace = tm.parse(LOG)
        self.assertEqual(trace.ends, {"bert-infer": [1020 * MS, 1095 * MS, 1100 * MS]})
        self.assertEqual([(op.job, op.kind) for op in trace.ops],
                         [("bert-infer", 0), ("recsys-train", 0), ("resnet-train", 0), ("resnet-train", 0),
                          ("resnet-train", 1)])

    def test_a_grant_covers_every_op_up_to_its_seq_and_no_later_one(self):
        ops = {(op.job, op.stamp_ns): op for op in tm.parse(LOG).ops}
        self.assertEqual(ops[("resnet-train", 1051 * MS)].granted_ns, 1052 * MS)
        self.assertEqual(ops[("resnet-train", int(1051.5 * MS))].granted_ns, 1052 * MS)
        self.assertEqual(ops[("resnet-train", int(1051.6 * MS))].granted_ns, 1054 * MS)
        self.assertEqual((ops[("recsys-train", 1030 * MS)].start_ns, ops[("recsys-train", 1030 * MS)].end_ns),
                         (1040 * MS, 1070 * MS))

    def test_an_op_posted_within_a_grant_already_made_was_granted_on_credit_when_posted(self):
        # gpuqosd grants through seqs not posted yet (credit): the shim issues those without asking.
        trace = tm.parse([granted(RESNET, 40, 11.0), posted(RESNET, 2, 0, 100.0, 1.0), posted(RESNET, 41, 0, 200.0, 1.0),
                          granted(RESNET, 72, 300.0)])
        self.assertEqual([op.granted_ns for op in trace.ops], [100 * MS, 300 * MS])

    def test_a_process_that_registers_again_starts_its_seqs_afresh(self):
        # The first session's op 3 is never granted; the second's ops 1-2 are, and its op 1 is not
        # the first session's.
        trace = tm.parse([posted(RESNET, 1, 0, 10.0), posted(RESNET, 2, 0, 11.0), granted(RESNET, 2, 12.0),
                          posted(RESNET, 3, 0, 13.0), done(RESNET, 1, 14.0, 15.0),
                          posted(RESNET, 1, 0, 50.0), posted(RESNET, 2, 0, 51.0), granted(RESNET, 2, 52.0),
                          done(RESNET, 1, 53.0, 54.0)])
        self.assertEqual([(op.granted_ns, op.start_ns) for op in trace.ops],
                         [(12 * MS, 14 * MS), (12 * MS, None), (None, None), (52 * MS, 53 * MS), (52 * MS, None)])

    def test_a_job_name_with_quotes_and_spaces_is_read_whole(self):
        tag = "job 'bob's ' pid 7' pid 40: "
        trace = tm.parse([posted(tag, 1, 0, 10.0, 2.0), granted(tag, 1, 11.0), done(tag, 1, 12.0, 14.0),
                          posted(tag, 2, 6, 15.0)])
        self.assertEqual([(op.job, op.granted_ns, op.end_ns) for op in trace.ops], [("bob's ' pid 7", 11 * MS, 14 * MS)])
        self.assertEqual(trace.ends, {"bob's ' pid 7": [15 * MS]})

    def test_a_copy_is_labelled_by_its_direction_and_an_older_log_without_one_still_reads(self):
        trace = tm.parse([posted(RESNET, 1, 1, 10.0, 1.0, direction=2), posted(RESNET, 2, 1, 11.0, 1.0, direction=3),
                          posted(RESNET, 3, 1, 12.0, 1.0, direction=None), posted(RESNET, 4, 0, 13.0, 1.0, direction=None)])
        self.assertEqual([tm.label(op) for op in trace.ops],
                         ["resnet-train (copy d2h)", "resnet-train (copy d2d)", "resnet-train (copy)", "resnet-train"])

    def test_two_processes_of_one_job_keep_their_own_seqs(self):
        other = "job 'resnet-train' pid 21: "
        trace = tm.parse([posted(RESNET, 1, 0, 10.0, 1.0), posted(other, 1, 0, 11.0, 2.0),
                          granted(other, 1, 12.0), done(other, 1, 13.0, 15.0)])
        first, second = trace.ops
        self.assertEqual((first.granted_ns, first.start_ns), (None, None))
        self.assertEqual((second.granted_ns, second.start_ns, second.end_ns), (12 * MS, 13 * MS, 15 * MS))


class Explain(unittest.TestCase):
    def setUp(self):
        self.trace = tm.parse(LOG)

    def test_a_request_arriving_during_a_long_kernel_sees_it_and_what_was_granted_meanwhile(self):
        (r,) = tm.explain(self.trace, "bert-infer", LATENCIES, [1])
        self.assertEqual(r["request"], 1)
        self.assertAlmostEqual(r["arrived_s"], 0.050)
        self.assertEqual(r["ahead"], 0)  # the first was answered at 1020
        self.assertEqual(r["running"], [("recsys-train", 30.0, 20.0)])
        # Window 1050-1095: recsys 1050-1070, resnet's two kernels' union 1053-1059; the copy is not compute.
        self.assertEqual(r["device_ms"], {"recsys-train": 20.0, "resnet-train": 6.0})
        self.assertEqual((r["granted"], r["granted_expected_ms"]), (3, 8.0))

    def test_a_request_counts_the_ones_still_in_the_system_ahead_of_it(self):
        (r,) = tm.explain(self.trace, "bert-infer", LATENCIES, [2])
        self.assertEqual(r["ahead"], 1)
        self.assertEqual(r["running"], [("recsys-train", 30.0, 10.0), ("resnet-train (copy h2d)", 2.0, 1.0)])
        self.assertEqual(r["device_ms"], {"recsys-train": 10.0})
        self.assertEqual(r["granted"], 0)  # resnet's ops were granted before it arrived

    def test_a_request_with_the_device_to_itself_sees_nothing(self):
        (r,) = tm.explain(self.trace, "bert-infer", LATENCIES, [0])
        self.assertEqual((r["running"], r["device_ms"], r["granted"]), ([], {}, 0))

    def test_query_ends_that_do_not_match_the_latencies_are_refused(self):
        for latencies in (LATENCIES + [1.0], LATENCIES[:2]):  # a mark dropped; one too many
            with self.assertRaisesRegex(ValueError, f"3 query_end marks in the trace and {len(latencies)} latencies"):
                tm.explain(self.trace, "bert-infer", latencies, [0])
        with self.assertRaisesRegex(ValueError, "0 query_end marks"):
            tm.explain(self.trace, "resnet-train", LATENCIES, [0])


class Phases(unittest.TestCase):
    def test_each_jobs_device_time_and_holds_are_split_by_whether_a_request_is_in_the_system(self):
        # The LC has a request in the system 1000-1020 and 1050-1100 (70 ms) and none 1020-1050
        # (30 ms). recsys: on the device 1040-1070, held from its read (1030.005) to its grant
        # (1039). resnet: its kernels' union 1053-1059; held from the first read (1051.005) to the
        # copy's grant (1054), the kernels' holds inside that.
        where = tm.phases(tm.parse(LOG), "bert-infer", LATENCIES)
        self.assertEqual((where["busy_ms"], where["idle_ms"]), (70.0, 30.0))
        recsys, resnet = where["jobs"]["recsys-train"], where["jobs"]["resnet-train"]
        self.assertEqual((recsys["busy"]["device_ms"], recsys["idle"]["device_ms"]), (20.0, 10.0))
        self.assertAlmostEqual(recsys["idle"]["held_ms"], 8.995)
        self.assertEqual(recsys["busy"]["held_ms"], 0.0)
        self.assertEqual((resnet["busy"]["device_ms"], resnet["idle"]["device_ms"]), (6.0, 0.0))
        self.assertAlmostEqual(resnet["busy"]["held_ms"], 2.995)
        self.assertEqual(set(where["jobs"]), {"recsys-train", "resnet-train"})  # not the LC's own

    def test_an_op_never_granted_is_held_to_the_end_and_a_credit_grant_not_at_all(self):
        trace = tm.parse([posted(LC, 1, 6, 100.0), granted(RESNET, 1, 50.0), posted(RESNET, 1, 0, 60.0),
                          posted(RESNET, 2, 0, 80.0), posted(LC, 2, 6, 200.0)])
        where = tm.phases(trace, "bert-infer", [10.0, 50.0])
        self.assertEqual((where["busy_ms"], where["idle_ms"]), (60.0, 50.0))  # 90-100, 150-200; 100-150
        resnet = where["jobs"]["resnet-train"]
        # Op 2 is held from its read (80.005) to the end (200): all of 90-100, 150-200 and 100-150.
        # Op 1 went on credit (posted at 60): it holds nothing, which a first request in the system
        # from 40 to 100 shows (only 80.005-100 of it counts, then 150-200).
        self.assertEqual(resnet["busy"]["held_ms"], 60.0)
        self.assertEqual(resnet["idle"]["held_ms"], 50.0)
        early = tm.phases(trace, "bert-infer", [60.0, 50.0])  # a request in the system 40-100
        self.assertEqual(early["jobs"]["resnet-train"]["busy"]["held_ms"], 20.0 - 0.005 + 50.0)

    def test_the_table_gives_shares_of_each_phase(self):
        text = tm.phase_table(tm.phases(tm.parse(LOG), "bert-infer", LATENCIES))
        self.assertIn("LC requests in the system 70 % of the run (0.1 s; none: 0.0 s)", text)
        self.assertIn("| recsys-train | 29 % | 0 % | 33 % | 30 % |", text)
        self.assertIn("| resnet-train | 9 % | 4 % | 0 % | 0 % |", text)

    def test_spans_are_merged_and_overlaps_measured(self):
        self.assertEqual(tm.merged([(5, 9), (1, 3), (2, 4), (9, 10), (7, 7)]), [(1, 4), (5, 10)])
        self.assertEqual(tm.overlap([(1, 4), (5, 10)], [(3, 6), (8, 20)]), 1 + 1 + 2)


class Pick(unittest.TestCase):
    def test_over_the_target_by_default_and_the_slowest_first(self):
        self.assertEqual(tm.pick([10.0, 50.0, 30.0, 45.0], 40.0, 0), [1, 3])
        self.assertEqual(tm.pick([10.0, 50.0, 30.0, 45.0], 60.0, 0), [])
        self.assertEqual(tm.pick([10.0, 50.0, 30.0, 45.0], 60.0, 3), [1, 3, 2])


class Report(unittest.TestCase):
    def folder(self, log_lines, latencies=LATENCIES, mode="lc"):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        d = tmp.name
        for sub in ("logs", "runs"):
            os.mkdir(os.path.join(d, sub))
        cells = [{"policy": p, "device_mode": "fifo", "lc_load": 0.2, "be_mix": "resnet+recsys", "status": "ok",
                  "target_ms": 42.0, "lc_p99_ms": 44.9} for p in ("none", "baymax")]
        with open(os.path.join(d, "qos.json"), "w") as f:
            json.dump({"cells": cells}, f)
        name = "baymax-fifo-0.20-resnet+recsys"
        with open(os.path.join(d, "logs", f"{name}-gpuqosd.log"), "w") as f:
            f.write("\n".join(log_lines) + "\n")
        for job, run_mode, lat in (("bert-infer", mode, latencies), ("resnet-train", "be", [])):
            with open(os.path.join(d, "runs", f"{name}-{job}.json"), "w") as f:
                json.dump({"config": {"mode": run_mode}, "latency_ms": lat}, f)
        return d

    def test_a_traced_cell_prints_its_over_target_requests(self):
        out = io.StringIO()
        self.assertEqual(tm.report(self.folder(LOG), out=out), 1)
        text = out.getvalue()
        self.assertIn("## baymax-fifo-0.20-resnet+recsys: 1 of 3 requests over the 42.0-ms target", text)
        self.assertIn("| 1 | 0.050 | 45.0 | 1.07 | 0 | recsys-train: 30.0, 20.0 | recsys-train 20.0, "
                      "resnet-train 6.0 | 3, 8.0 |", text)
        self.assertNotIn("| 2 |", text)
        self.assertNotIn("none-", text)  # no gpuqosd, no log

    def test_worst_shows_the_slowest_whether_over_or_not(self):
        out = io.StringIO()
        tm.report(self.folder(LOG), worst=2, out=out)
        rows = [line for line in out.getvalue().splitlines() if line.startswith("| ") and line[2].isdigit()]
        self.assertEqual([row.split(" | ")[0] for row in rows], ["| 1", "| 2"])

    def test_a_cell_whose_marks_do_not_match_is_said_and_skipped(self):
        out = io.StringIO()
        self.assertEqual(tm.report(self.folder([line for line in LOG if " kind 6 " not in line]), out=out), 0)
        self.assertIn("## baymax-fifo-0.20-resnet+recsys: cannot pair its requests with the trace: bert-infer has 0 "
                      "query_end marks in the trace and 3 latencies", out.getvalue())
        self.assertNotIn("| request |", out.getvalue())

    def test_an_untraced_log_says_how_to_trace_it(self):
        out = io.StringIO()
        self.assertEqual(tm.report(self.folder(LOG[:1]), out=out), 0)
        self.assertIn("no trace (run with --daemon-log-level trace)", out.getvalue())

    def test_the_command_fails_with_a_message_when_nothing_is_traced_or_marks_do_not_match(self):
        untraced = subprocess.run([sys.executable, SCRIPT, self.folder(LOG[:1])], capture_output=True, text=True)
        self.assertNotEqual(untraced.returncode, 0)
        self.assertIn("no traced cell", untraced.stderr)
        mismatched = subprocess.run([sys.executable, SCRIPT, self.folder(LOG, latencies=LATENCIES + [1.0])],
                                    capture_output=True, text=True)
        self.assertNotEqual(mismatched.returncode, 0)
        self.assertIn("4 latencies", mismatched.stdout)
        self.assertIn("no traced cell it could read", mismatched.stderr)
        missing = subprocess.run([sys.executable, SCRIPT, os.path.join(self.folder(LOG), "nowhere")],
                                 capture_output=True, text=True)
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn("qos.json", missing.stderr)


if __name__ == "__main__":
    unittest.main()
