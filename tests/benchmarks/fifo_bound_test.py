"""Tests of benchmarks/qos/fifo_bound.py, the model that bounds recsys's share on a fifo device."""
import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "qos"))
import fifo_bound  # noqa: E402


class Simulate(unittest.TestCase):
    def test_an_idle_lc_query_takes_its_host_and_device_time(self):
        # One query a minute and no kernel (the gap is longer than the run): each is served alone.
        latencies, kernels = fifo_bound.simulate(1 / 60, 14.0, 1.5, 97.0, 1e12, 600, seed=3)
        self.assertEqual(kernels, 0)
        self.assertGreater(len(latencies), 3)
        for latency in latencies:
            self.assertAlmostEqual(latency, 15.5)

    def test_a_query_arriving_during_a_kernel_waits_for_its_end(self):
        latencies, kernels = fifo_bound.simulate(12.6, 14.0, 1.5, 97.0, 0.0, 200, seed=1)
        self.assertGreater(kernels, 0)
        # Kernels back to back while the LC is idle: some query finds one just started.
        self.assertGreater(max(latencies), 90.0)
        self.assertGreaterEqual(min(latencies), 15.5 - 1e-9)

    def test_the_same_seed_gives_the_same_run(self):
        self.assertEqual(fifo_bound.simulate(25.0, 14.0, 1.5, 97.0, 500.0, 50, seed=7),
                         fifo_bound.simulate(25.0, 14.0, 1.5, 97.0, 500.0, 50, seed=7))


class BestRate(unittest.TestCase):
    def test_a_target_longer_than_any_wait_lets_kernels_run_whenever_the_lc_is_idle(self):
        free, _ = fifo_bound.simulate(12.6, 14.0, 1.5, 97.0, 0.0, 500, seed=1)
        rate, p99 = fifo_bound.best_rate(12.6, 1000.0, 14.0, 1.5, 97.0, seconds=500)
        self.assertGreater(rate, 5.0)  # about 9 a second: back to back in the LC's idle time
        self.assertLessEqual(p99, 1000.0)
        self.assertEqual(p99, fifo_bound.p99(free))

    def test_a_kernel_longer_than_the_target_is_rationed_to_keep_the_p99(self):
        # The benchmark's fifo cell at load 0.2: running recsys's kernel whenever the LC is idle
        # puts the p99 over the target, so the rate must fall until it is met.
        unthrottled, _ = fifo_bound.simulate(12.6, 14.6, 1.24, 97.1, 0.0, 1000, seed=1)
        self.assertGreater(fifo_bound.p99(unthrottled), 64.4)
        rate, p99 = fifo_bound.best_rate(12.6, 64.4, 14.6, 1.24, 97.1, seconds=1000)
        self.assertLessEqual(p99, 64.4)
        self.assertGreater(rate, 0.1)  # about 0.2 a second: rationed, not stopped
        self.assertLess(rate, 0.5)

    def test_a_target_the_lc_misses_alone_allows_no_kernel(self):
        alone, _ = fifo_bound.simulate(37.9, 14.6, 1.24, 97.1, 1e12, 1000, seed=1)
        rate, p99 = fifo_bound.best_rate(37.9, fifo_bound.p99(alone) - 1.0, 14.6, 1.24, 97.1, seconds=1000)
        self.assertEqual(rate, 0.0)
        self.assertEqual(p99, fifo_bound.p99(alone))

    def test_the_p99_is_the_nearest_rank(self):
        self.assertEqual(fifo_bound.p99(list(range(1, 101))), 99)
        self.assertEqual(fifo_bound.p99(list(range(1, 201))), 198)
        self.assertEqual(fifo_bound.p99([5.0]), 5.0)

    def test_a_longer_kernel_gets_a_lower_rate(self):
        short, _ = fifo_bound.best_rate(12.6, 64.4, 14.6, 1.24, 80.0, seconds=1000)
        long, _ = fifo_bound.best_rate(12.6, 64.4, 14.6, 1.24, 120.0, seconds=1000)
        self.assertLess(long, short)


class CellBound(unittest.TestCase):
    def test_cells_meeting_counts_the_stretches_whose_own_p99_is_within(self):
        # Three stretches of 100: the first's p99 is 99, the second's 200 (two outliers), the third's 99.
        latencies = list(range(1, 101)) + [1.0] * 98 + [200.0, 300.0] + list(range(1, 101)) + [1000.0] * 7
        self.assertAlmostEqual(fifo_bound.cells_meeting(latencies, 150.0, 100), 2 / 3)
        self.assertEqual(fifo_bound.cells_meeting(latencies, 250.0, 100), 1.0)
        self.assertEqual(fifo_bound.cells_meeting(latencies, 50.0, 100), 0.0)

    def test_cells_of_a_few_hundred_queries_allow_fewer_kernels_than_the_long_run(self):
        # The fifo cell at load 0.2: a 470-query cell's p99 is its fifth-worst query, which one kernel
        # meeting one burst decides, so keeping 90 % of such cells within the target takes a lower rate
        # than keeping the p99 of the whole run.
        long_run, _ = fifo_bound.best_rate(12.6, 64.4, 14.6, 1.24, 97.1, seconds=2000)
        per_cell, _ = fifo_bound.best_rate(12.6, 64.4, 14.6, 1.24, 97.1, seconds=2000, cell_queries=470)
        self.assertGreater(per_cell, 0.0)
        self.assertLess(per_cell, 0.8 * long_run)


def results_folder(directory, results):
    """A gpuqos-bench results folder holding `results` as qos.json and the two workloads the model reads
    (BERT: 1.24 ms of device work per query at time scale 4; recsys: a 97.1-ms kernel)."""
    os.makedirs(os.path.join(directory, "workloads"))
    with open(os.path.join(directory, "qos.json"), "w") as f:
        json.dump(results, f)
    with open(os.path.join(directory, "workloads", "bert.json"), "w") as f:
        json.dump({"busy_ns": 310000, "iterations": [{}]}, f)
    with open(os.path.join(directory, "workloads", "recsys.json"), "w") as f:
        json.dump({"ops": [{"kind": "kernel", "duration_ns": 24275000}, {"kind": "copy", "duration_ns": 1}]}, f)


GOOD = {
    "config": {"time_scale": 4},
    "standalone": [
        {"kind": "lc_calibration", "device_mode": "fifo", "status": "ok", "lc_mean_ms": 15.84},
        {"kind": "be", "device_mode": "fifo", "job": "recsys-train", "status": "ok", "iterations_per_s": 1.0},
        {"kind": "lc", "device_mode": "fifo", "lc_load": 0.2, "status": "ok", "rate_per_s": 12.6,
         "target_ms": 64.4, "lc_gpu_busy_fraction": 0.05},
    ],
    "cells": [],
}


class ReferencesThatFailed(unittest.TestCase):
    """A review: a failed or missing reference (null figures, or zeros in an older qos.json) made the
    script die with ZeroDivisionError (recsys at 0 it/s; a rate of 0 into expovariate) or TypeError,
    and qos.md lost the section. It must say which reference is missing and go on."""

    def run_script(self, results):
        with tempfile.TemporaryDirectory() as directory:
            results_folder(directory, results)
            script = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "qos", "fifo_bound.py")
            done = subprocess.run([sys.executable, script, directory], capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("Traceback", done.stderr)
        return done.stdout

    def test_recsys_alone_at_zero_or_failed_gives_no_bound_and_says_why(self):
        for recsys, why in (({"status": "ok", "iterations_per_s": 0.0}, "recsys alone (fifo) has no iterations_per_s"),
                            ({"status": "failed", "reason": "crashed", "iterations_per_s": None},
                             "recsys alone (fifo) failed: crashed")):
            results = copy.deepcopy(GOOD)
            results["standalone"][1].update(recsys)
            self.assertEqual(self.run_script(results).strip(), f"No bound: {why}.")

    def test_a_missing_calibration_gives_no_bound(self):
        results = copy.deepcopy(GOOD)
        del results["standalone"][0]
        self.assertIn("No bound: the LC's closed-loop calibration (fifo) was not run.", self.run_script(results))

    def test_a_failed_or_zero_lc_reference_skips_its_load_only(self):
        results = copy.deepcopy(GOOD)
        results["standalone"] += [
            {"kind": "lc", "device_mode": "fifo", "lc_load": 0.4, "status": "failed", "reason": "replayer crashed\n| tail",
             "rate_per_s": 25.2, "target_ms": None, "lc_gpu_busy_fraction": None},
            {"kind": "lc", "device_mode": "fifo", "lc_load": 0.6, "status": "ok", "rate_per_s": 0.0,
             "target_ms": 0.0, "lc_gpu_busy_fraction": 0.0},
            {"kind": "lc", "device_mode": "fifo", "lc_load": 0.8, "status": "ok", "rate_per_s": 50.0,
             "target_ms": 90.0, "lc_gpu_busy_fraction": 1.0},
        ]
        # The measured baymax cell with no BE % of ideal (its reference failed): n/a, not a crash.
        results["cells"] = [{"policy": "baymax", "device_mode": "fifo", "lc_load": 0.2, "be_mix": "resnet+recsys",
                             "status": "ok", "lc_queries": 470, "be_fraction_of_ideal": None}]
        lines = fifo_bound.bound_table(results, 1.24, 97.1, seconds=300)
        rows = [line for line in lines if line.startswith("| 0.")]
        self.assertEqual(len(rows), 4, lines)
        self.assertTrue(rows[0].startswith("| 0.20 | 12.6 | 64.40 | "), rows[0])
        self.assertIn(" | 470 | ", rows[0])  # the cell's query count
        self.assertTrue(rows[0].endswith(" | n/a |"), rows[0])
        self.assertEqual(rows[1], "| 0.40 | skipped: the LC alone at this load failed: replayer crashed \\| tail |" + " |" * 9)
        self.assertIn("| 0.60 | skipped: the LC alone at this load has no rate_per_s |", rows[2])
        self.assertIn("| 0.80 | skipped: the LC alone at this load left the GPU no idle time |", rows[3])
        for row in rows:
            self.assertEqual(row.replace("\\|", "").count("|"), 12, row)  # the header's 11 columns
        self.assertIn("| 0.40 | skipped: the LC alone at this load failed", self.run_script(results))


if __name__ == "__main__":
    unittest.main()
