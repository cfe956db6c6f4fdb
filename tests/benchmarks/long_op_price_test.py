"""Tests of benchmarks/qos/long_op_price.py: gpuqosd's long-op count against a replay of arrivals."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "qos"))
import long_op_price as lop  # noqa: E402

# One request every 40 ms, 8-ms queries, a target of 100 ms less a 1-ms margin (the scheduler's
# BaymaxPolicy test uses the same job).
EVERY_40 = [40.0 * i for i in range(200)]


class Arrivals(unittest.TestCase):
    def test_the_first_arrives_at_the_start_and_the_rest_at_the_rate(self):
        times = lop.arrivals(38.0, 1, 20000)
        self.assertEqual(times[0], 0.0)
        self.assertTrue(all(b > a for a, b in zip(times, times[1:])))
        self.assertAlmostEqual(times[-1] / (len(times) - 1), 1000.0 / 38.0, delta=0.5)

    def test_the_same_seed_gives_the_same_arrivals(self):
        self.assertEqual(lop.arrivals(12.0, 7, 50), lop.arrivals(12.0, 7, 50))
        self.assertNotEqual(lop.arrivals(12.0, 7, 50), lop.arrivals(12.0, 8, 50))

    def test_a_burst_queues_and_a_long_gap_empties_the_queue(self):
        self.assertEqual(lop.finishes([0.0, 2.0, 4.0, 44.0], 10.0), [10.0, 20.0, 30.0, 54.0])
        self.assertEqual(lop.finishes([0.0, 1.0], [5.0, 3.0]), [5.0, 8.0])


class Counts(unittest.TestCase):
    def test_with_evenly_spaced_arrivals_the_replay_is_what_gpuqosd_expects(self):
        # A 100-ms op: the request arriving x into it answers in 108 - x, over 99 for x < 9 ms of
        # the 32 ms the queue is idle; the next one, 40 ms later, is in time. gpuqosd: (100 - 91) /
        # (1 - 0.2) / 40 = 9 / 32.
        self.assertAlmostEqual(lop.gpuqosd_count(EVERY_40, 8.0, 100.0, 1.0, 100.0), 9 / 32)
        mean, sd, p95, p99, most = lop.summary(lop.replay_counts(EVERY_40, 8.0, 99.0, 100.0))
        self.assertAlmostEqual(mean, 9 / 32)
        self.assertEqual((p95, p99, most), (1, 1, 1))
        self.assertGreater(sd, 0)
        # A 150-ms op: the first always misses (158 - x), the second for x < 27 (126 - x), the
        # third never (94 - x): 1 + 27 / 32, and gpuqosd's (150 - 91) / 0.8 / 40 is the same.
        self.assertAlmostEqual(lop.gpuqosd_count(EVERY_40, 8.0, 100.0, 1.0, 150.0), 59 / 32)
        self.assertAlmostEqual(lop.summary(lop.replay_counts(EVERY_40, 8.0, 99.0, 150.0))[0], 59 / 32)

    def test_an_op_that_ends_before_any_request_could_miss_costs_nothing(self):
        self.assertEqual(lop.gpuqosd_count(EVERY_40, 8.0, 100.0, 1.0, 80.0), 0.0)
        self.assertEqual(lop.summary(lop.replay_counts(EVERY_40, 8.0, 99.0, 80.0))[4], 0)

    def test_requests_that_miss_without_the_op_are_not_its_misses(self):
        # Queries longer than the target: every request misses anyway.
        self.assertIsNone(lop.gpuqosd_count(EVERY_40, 8.0, 6.0, 1.0, 100.0))
        self.assertEqual(lop.summary(lop.replay_counts(EVERY_40, 8.0, 5.0, 100.0))[4], 0)

    def test_bursts_at_the_same_rate_cost_more_and_all_at_once(self):
        # In threes 1 ms apart every 120 ms: the same mean rate as EVERY_40.
        threes = [120.0 * (i // 3) + (i % 3) for i in range(198)]
        one_by_one = lop.summary(lop.replay_counts(EVERY_40, 8.0, 99.0, 100.0))
        bursts = lop.summary(lop.replay_counts(threes, 8.0, 99.0, 100.0))
        self.assertGreater(bursts[0], one_by_one[0])
        self.assertEqual(bursts[4], 3, "an op meeting a burst makes all three miss")
        self.assertGreater(lop.gpuqosd_count(threes, 8.0, 100.0, 1.0, 100.0), 9 / 32)

    def test_an_effect_running_past_the_last_arrival_is_left_out(self):
        self.assertEqual(lop.replay_counts([0.0, 40.0, 80.0], 8.0, 99.0, 1000.0), [])

    def test_the_price_is_three_times_a_rare_count_and_two_sigmas_over_a_common_one(self):
        self.assertAlmostEqual(lop.priced_count(0.25), 0.75)
        self.assertAlmostEqual(lop.priced_count(4.0), 8.0)


class Margin(unittest.TestCase):
    def test_the_jobs_own_margin_or_else_the_policys(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.toml")
            with open(path, "w") as f:
                f.write('[policy.baymax]\nsafety_margin_ms = 4.0\n'
                        '[[job]]\nname = "bert-infer"\nsafety_margin_ms = 10.0\n[[job]]\nname = "other"\n')
            self.assertEqual(lop.job_margin(path, "bert-infer"), 10.0)
            self.assertEqual(lop.job_margin(path, "other"), 4.0)



def results_dir(d, standalone):
    """A results folder holding qos.json with these fifo LC standalone records, and the run and config
    files of the loads whose run went."""
    os.makedirs(os.path.join(d, "runs"))
    os.makedirs(os.path.join(d, "configs"))
    with open(os.path.join(d, "qos.json"), "w") as f:
        json.dump({"config": {"time_scale": 1.0}, "standalone": standalone, "cells": []}, f)
    for record in standalone:
        load = f"{record['lc_load']:.2f}"
        if record.get("status") == "ok" and load in ("0.40", "0.80"):
            with open(os.path.join(d, "runs", f"alone-fifo-lc-{load}-bert-infer.json"), "w") as f:
                json.dump({"config": {"rate_per_s": 25.0, "seed": 1}, "latency_ms": [8.0] * 100,
                           "service_ms": [8.0] * 100}, f)
        if record.get("status") == "ok" and load == "0.40":  # 0.80's config is missing
            with open(os.path.join(d, "configs", f"baymax-fifo-{load}-resnet+recsys.toml"), "w") as f:
                f.write("[policy.baymax]\nsafety_margin_ms = 1.0\n")


class Table(unittest.TestCase):
    def test_a_load_without_a_usable_reference_is_a_row_saying_why(self):
        def lc(load, status="ok", target=100.0, rate=25.0):
            return {"kind": "lc", "device_mode": "fifo", "lc_load": load, "status": status,
                    "reason": "simgpud died\nlog | tail", "target_ms": target, "rate_per_s": rate}
        with tempfile.TemporaryDirectory() as d:
            results_dir(d, [lc(0.2, status="failed", target=None, rate=None), lc(0.4), lc(0.6), lc(0.8)])
            lines = lop.price_table(d, [100.0])
        self.assertEqual(len(lines), 6, lines)
        self.assertEqual(lines[2], "| 0.20 | skipped: the LC alone at this load failed: simgpud died log \\| tail |"
                         + " |" * 10, "one row, its reason's '|' escaped")
        self.assertTrue(lines[3].startswith("| 0.40 | 100.0 | 8.0 |"), lines[3])
        self.assertEqual(lines[3].count("|"), lines[0].count("|"))
        self.assertIn("| 0.60 | skipped: runs/alone-fifo-lc-0.60-bert-infer.json is missing |", lines[4])
        self.assertEqual(lines[4].count("|"), lines[0].count("|"))
        self.assertIn("| 0.80 | skipped: configs/baymax-fifo-0.80-resnet+recsys.toml is missing |", lines[5])


if __name__ == "__main__":
    unittest.main()
