"""Tests of scripts/demo.sh's command line: what it hands gpuqos-bench, with a stand-in for it."""
import os
import signal
import stat
import subprocess
import tempfile
import time
import unittest

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEMO = os.path.join(ROOT, "scripts", "demo.sh")


class DemoCommandLine(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="gpuqos-demo-test-")
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.realpath(self.tmp.name)  # as demo.sh names it (TMPDIR may be a link)
        bin_dir = os.path.join(self.tmp.name, "build", "bin")
        os.makedirs(bin_dir)
        self.args_file = os.path.join(self.tmp.name, "args")
        bench = os.path.join(bin_dir, "gpuqos-bench")
        with open(bench, "w") as f:  # writes its arguments one per line
            f.write(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{self.args_file}"\n')
        os.chmod(bench, os.stat(bench).st_mode | stat.S_IXUSR)
        self.traces = os.path.join(self.tmp.name, "traces")
        os.makedirs(self.traces)

    def run_demo(self, *args, cwd=None):
        env = dict(os.environ, DEMO_SKIP_BUILD="1", DEMO_BUILD_DIR=os.path.join(self.tmp.name, "build"),
                   GPUQOS_TRACES=self.traces)
        return subprocess.run(["bash", DEMO, *args], env=env, cwd=cwd or self.dir, capture_output=True,
                              text=True, timeout=60)

    def bench_args(self):
        with open(self.args_file) as f:
            return f.read().splitlines()

    def out_of(self, args):
        return args[args.index("--out") + 1]

    def test_quick_writes_into_the_repositorys_results_by_default(self):
        done = self.run_demo()
        self.assertEqual(done.returncode, 0, done.stderr)
        args = self.bench_args()
        self.assertEqual(args[:2], ["qos", "--quick"])
        self.assertEqual(self.out_of(args), os.path.join(ROOT, "results", "qos"))

    def test_out_names_the_folder_relative_to_where_it_was_run(self):
        done = self.run_demo("--out", "mine")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(self.out_of(self.bench_args()), os.path.join(self.dir, "mine"))
        done = self.run_demo("full", "--out=" + os.path.join(self.dir, "grid"))
        self.assertEqual(done.returncode, 0, done.stderr)
        args = self.bench_args()
        self.assertNotIn("--quick", args)
        self.assertEqual(self.out_of(args), os.path.join(self.dir, "grid"))

    def test_a_bad_command_line_says_how_to_use_it(self):
        for args, said in ((["fast"], "unknown argument 'fast'"), (["--out"], "usage:"), (["--out", ""], "usage:"),
                           (["--out", "-h"], "--out takes a folder, not '-h'"),
                           (["quick", "full"], "one mode at most (got 'quick' and 'full')"),
                           (["--out", "a", "--out", "b"], "--out given twice")):
            done = self.run_demo(*args)
            self.assertEqual(done.returncode, 2, args)
            self.assertIn(said, done.stderr)
            self.assertIn("usage: scripts/demo.sh [quick|full|fidelity] [--out DIR]", done.stderr)
            self.assertFalse(os.path.exists(self.args_file), "the benchmark did not run")

    def test_help_is_an_answer_not_an_error(self):
        done = self.run_demo("--help")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("usage: scripts/demo.sh [quick|full|fidelity] [--out DIR]", done.stdout)
        self.assertIn("scripts/demo.sh full       the full grid", done.stdout)  # the modes explained
        self.assertNotIn("set -euo", done.stdout)
        self.assertFalse(os.path.exists(self.args_file), "the benchmark did not run")

    def test_a_missing_traces_folder_is_named(self):
        missing = os.path.join(self.dir, "no-traces")
        env = dict(os.environ, DEMO_SKIP_BUILD="1", DEMO_BUILD_DIR=os.path.join(self.dir, "build"),
                   GPUQOS_TRACES=missing)
        done = subprocess.run(["bash", DEMO], env=env, cwd=self.dir, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 1)
        self.assertIn(f"no traces folder at {missing} (GPUQOS_TRACES names it)", done.stderr)
        self.assertFalse(os.path.exists(self.args_file), "the benchmark did not run")


    def test_a_build_it_cannot_use_is_refused_before_anything_runs(self):
        env = dict(os.environ, DEMO_SKIP_BUILD="1", DEMO_BUILD_DIR=os.path.join(self.dir, "nothing"),
                   GPUQOS_TRACES=self.traces)
        done = subprocess.run(["bash", DEMO], env=env, cwd=self.dir, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 1)
        self.assertIn("DEMO_SKIP_BUILD=1 but " + os.path.join(self.dir, "nothing", "bin", "gpuqos-bench") + " is not there",
                      done.stderr)
        # fidelity needs the replay's programs, not the benchmark (a review: only gpuqos-bench was checked)
        done = self.run_demo("fidelity")
        self.assertEqual(done.returncode, 1)
        self.assertIn("gpuqos-trace2workload is not there", done.stderr)
        env = dict(os.environ, DEMO_BUILD_DIR=os.path.join(self.tmp.name, "build"), GPUQOS_TRACES=self.traces)
        done = subprocess.run(["bash", DEMO], env=env, cwd=self.dir, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 1)
        self.assertIn("DEMO_BUILD_DIR is run from, not built: set DEMO_SKIP_BUILD=1 with it", done.stderr)
        self.assertFalse(os.path.exists(self.args_file), "the benchmark did not run")
        # The default tree named otherwise is the default tree: built as usual (a stand-in build.sh here).
        repo = os.path.join(self.dir, "repo")
        os.makedirs(os.path.join(repo, "scripts"))
        os.makedirs(os.path.join(repo, "build", "bin"))
        with open(os.path.join(repo, "scripts", "demo.sh"), "w") as f, open(DEMO) as original:
            f.write(original.read())
        with open(os.path.join(repo, "scripts", "build.sh"), "w") as f:
            f.write(f'#!/bin/sh\ntouch "{self.dir}/built"\n')
        os.chmod(os.path.join(repo, "scripts", "build.sh"), 0o755)
        bench = os.path.join(repo, "build", "bin", "gpuqos-bench")
        with open(bench, "w") as f:
            f.write(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{self.args_file}"\n')
        os.chmod(bench, 0o755)
        for named in ("build", "build/", os.path.join(repo, "build")):
            env = dict(os.environ, DEMO_BUILD_DIR=named, GPUQOS_TRACES=self.traces)
            env.pop("DEMO_SKIP_BUILD", None)
            done = subprocess.run(["bash", os.path.join(repo, "scripts", "demo.sh")], env=env, cwd=self.dir,
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(done.returncode, 0, (named, done.stderr))
            self.assertTrue(os.path.exists(os.path.join(self.dir, "built")), named)
            os.unlink(os.path.join(self.dir, "built"))

    def stand_in(self, name, text):
        path = os.path.join(self.tmp.name, "build", "bin", name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + text + "\n")
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)

    def test_fidelity_cleans_up_when_terminated(self):
        # SIGTERM to the whole group (timeout, a cancelled CI job) while a replay runs: bash ran the
        # EXIT trap on SIGINT but not always on SIGTERM, and left its temp dir behind (a review).
        started = os.path.join(self.dir, "replay-started")
        self.stand_in("gpuqos-trace2workload", "exit 0")
        self.stand_in("simgpud", 'exec python3 -c "import socket, sys, time; s = socket.socket(socket.AF_UNIX); '
                                 's.bind(sys.argv[1]); time.sleep(60)" "$2"')
        self.stand_in("simgpu-stat", "echo {}")
        self.stand_in("gpuqos-replay", f'touch "{started}"; sleep 60')
        temp_root = os.path.join(self.dir, "tmp")
        os.makedirs(temp_root)
        env = dict(os.environ, DEMO_SKIP_BUILD="1", DEMO_BUILD_DIR=os.path.join(self.tmp.name, "build"),
                   GPUQOS_TRACES=self.traces, TMPDIR=temp_root)
        demo = subprocess.Popen(["bash", DEMO, "fidelity", "--out", os.path.join(self.dir, "w")], env=env,
                                cwd=self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(started) and time.monotonic() < deadline and demo.poll() is None:
                time.sleep(0.05)
            self.assertTrue(os.path.exists(started), demo.stderr.read().decode() if demo.poll() is not None else "")
            self.assertEqual(len(os.listdir(temp_root)), 1, "its temp dir, while it runs")
            os.killpg(demo.pid, signal.SIGTERM)
            self.assertEqual(demo.wait(timeout=30), 143)
        finally:
            if demo.poll() is None:
                os.killpg(demo.pid, signal.SIGKILL)
                demo.wait()
            demo.stderr.close()
        self.assertEqual(os.listdir(temp_root), [], "the temp dir is removed")


if __name__ == "__main__":
    unittest.main()
