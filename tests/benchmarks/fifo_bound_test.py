"""Tests of benchmarks/qos/fifo_bound.py, the model that bounds recsys's share on a fifo device."""
import os
import sys
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


if __name__ == "__main__":
    unittest.main()
