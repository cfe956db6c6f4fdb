#!/usr/bin/env bash
# The main job: installs what is missing, builds gpuqos and runs the quick QoS benchmark
# (gpuqos-bench qos --quick: a BERT query stream beside ResNet-50 training on simgpu, under the
# policies none, fifo, priority and baymax, in device modes fifo and timeslice), printing its table.
#
#   scripts/demo.sh            quick QoS benchmark (about 1.5 minutes after the build); files in results/qos
#   scripts/demo.sh full       the full grid (3 loads x 2 best-effort mixes; about 22 minutes); results/qos-full
#   scripts/demo.sh fidelity   the replayer's fidelity: the BERT query and a ResNet-50 iteration replayed
#                              on simgpu, the trace's figures beside the simulated ones (its workloads in
#                              $DEMO_BUILD_DIR/workloads)
#   --out DIR                  (after any of them) write there instead; a relative DIR is taken
#                              from where demo.sh runs (GPUQOS_TRACES and DEMO_BUILD_DIR from the repository)
#
# Environment: DEMO_BUILD_DIR (default build/; set it with DEMO_SKIP_BUILD=1 to use a tree you
# built yourself), GPUQOS_TRACES (default ../shared/traces), DEMO_QUERIES, DEMO_ITERATIONS (fidelity).
set -euo pipefail
usage="usage: scripts/demo.sh [quick|full|fidelity] [--out DIR]"
refuse() { echo "scripts/demo.sh: $1" >&2; echo "$usage" >&2; exit 2; }
absolute() { [[ $1 == /* ]] && echo "$1" || echo "$PWD/$1"; }
what=
out_dir=
while (($#)); do
  case $1 in
    quick | full | fidelity)
      [[ -z $what ]] || refuse "one mode at most (got '$what' and '$1')"
      what=$1
      ;;
    --out | --out=*)
      if [[ $1 == --out ]]; then
        (($# >= 2)) || refuse "--out needs a folder"
        dir=$2
        shift
      else
        dir=${1#--out=}
      fi
      [[ -n $dir ]] || refuse "--out needs a folder"
      [[ $dir != -* ]] || refuse "--out takes a folder, not '$dir'"
      [[ -z $out_dir ]] || refuse "--out given twice"
      out_dir=$(absolute "$dir")
      ;;
    -h | --help) echo "$usage"; sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) refuse "unknown argument '$1'" ;;
  esac
  shift
done
what=${what:-quick}
cd "$(dirname "$0")/.."
root=$PWD
traces=${GPUQOS_TRACES:-$root/../shared/traces}
[[ -d $traces ]] || { echo "scripts/demo.sh: no traces folder at $traces (GPUQOS_TRACES names it)" >&2; exit 1; }
traces=$(cd "$traces" && pwd)
build=${DEMO_BUILD_DIR:-$root/build}
bin=$build/bin

if [[ $what == fidelity ]]; then
  needed=(gpuqos-trace2workload simgpud simgpu-stat gpuqos-replay)
else
  needed=(gpuqos-bench)
fi
if [[ ${DEMO_SKIP_BUILD:-0} == 1 ]]; then
  for program in "${needed[@]}"; do
    [[ -x $bin/$program ]] || { echo "scripts/demo.sh: DEMO_SKIP_BUILD=1 but $bin/$program is not there" >&2; exit 1; }
  done
elif [[ $(realpath -m "$build") != "$(realpath -m "$root/build")" ]]; then
  echo "scripts/demo.sh: DEMO_BUILD_DIR is run from, not built: set DEMO_SKIP_BUILD=1 with it" >&2
  exit 1
else
  scripts/build.sh
fi

if [[ $what == quick ]]; then
  exec "$bin/gpuqos-bench" qos --quick --traces "$traces" --out "${out_dir:-$root/results/qos}"
elif [[ $what == full ]]; then
  exec "$bin/gpuqos-bench" qos --traces "$traces" --out "${out_dir:-$root/results/qos-full}"
fi

# fidelity
out=${out_dir:-$build/workloads}
queries=${DEMO_QUERIES:-20}
iterations=${DEMO_ITERATIONS:-3}
mkdir -p "$out"

echo "== converting traces into $out"
"$bin/gpuqos-trace2workload" --trace "$traces/tracelens_h100_bert_small_bs1_infer.json.gz" \
  --out "$out/bert.json" --ptx "$out/bert.ptx" --catalog "$out/catalog.json"
"$bin/gpuqos-trace2workload" --trace "$traces/kineto_resnet50_v100_train.json.gz" --iteration 1 \
  --out "$out/resnet50.json" --ptx "$out/resnet50.ptx"

tmp=$(mktemp -d -t gpuqos-demo-XXXXXX)
simgpud_pid=
cleanup() {
  if [[ -n $simgpud_pid ]]; then
    kill "$simgpud_pid" 2>/dev/null || true
    wait "$simgpud_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
# A signal ends the script through exit, so the EXIT trap runs (bash runs it on exit, not on every
# deadly signal: a SIGTERM from timeout or a cancelled CI job left the temp dir behind).
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

export SIMGPU_SOCKET=$tmp/simgpu.sock
export LD_LIBRARY_PATH=$build/lib/simgpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$bin/simgpud" --socket "$SIMGPU_SOCKET" --catalog "$out/catalog.json" --log-level warn >"$tmp/simgpud.log" 2>&1 &
simgpud_pid=$!
for _ in $(seq 500); do
  [[ -S $SIMGPU_SOCKET ]] && break
  kill -0 "$simgpud_pid" 2>/dev/null || { echo "demo: simgpud exited at start:" >&2; cat "$tmp/simgpud.log" >&2; exit 1; }
  sleep 0.02
done
[[ -S $SIMGPU_SOCKET ]] || { echo "demo: simgpud did not start" >&2; cat "$tmp/simgpud.log"; exit 1; }

stat() { "$bin/simgpu-stat" --socket "$SIMGPU_SOCKET" >"$tmp/$1.json"; }

echo "== replaying the BERT query $queries times (closed loop)"
stat bert-before
"$bin/gpuqos-replay" --workload "$out/bert.json" --ptx "$out/bert.ptx" --mode lc --closed-loop \
  --queries "$queries" --out "$out/bert-results.json"
stat bert-after

echo "== replaying the ResNet-50 iteration $iterations times (back to back)"
"$bin/gpuqos-replay" --workload "$out/resnet50.json" --ptx "$out/resnet50.ptx" --mode be \
  --iterations "$iterations" --out "$out/resnet50-results.json"
stat resnet-after

python3 - "$out" "$tmp" "$queries" "$iterations" <<'PY'
import json, sys
out, tmp, queries, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
load = lambda p: json.load(open(p))
dev = lambda name: load(f"{tmp}/{name}.json")["devices"][0]
engines = ("compute_busy_ns", "h2d_busy_ns", "d2h_busy_ns", "local_busy_ns")
def busy(a, b, n, keys=engines):
    return sum(b[k] - a[k] for k in keys) / n / 1e6
bert, resnet = load(f"{out}/bert.json"), load(f"{out}/resnet50.json")
bert_r, resnet_r = load(f"{out}/bert-results.json"), load(f"{out}/resnet50-results.json")
b0, b1, r1 = dev("bert-before"), dev("bert-after"), dev("resnet-after")
rows = [
    ("BERT query", "kernel busy time (ms)", bert["kernel_busy_ns"] / 1e6, busy(b0, b1, queries, ("compute_busy_ns",))),
    ("BERT query", "device busy time (ms)", bert["busy_ns"] / 1e6, busy(b0, b1, queries)),
    ("BERT query", "query time, device (ms, p50)", bert["span_ns"] / 1e6, bert_r["summary"]["device"]["p50_ms"]),
    ("BERT query", "query latency, host (ms, p50)", bert["span_ns"] / 1e6, bert_r["summary"]["p50_ms"]),
    ("ResNet-50 iteration", "device busy time (ms)", resnet["busy_ns"] / 1e6, busy(b1, r1, iterations)),
    ("ResNet-50 iteration", "iteration time (ms, mean)", resnet["iterations"][0]["span_ns"] / 1e6,
     resnet_r["summary"]["mean_ms"]),
]
print()
print(f"{'workload':<20} {'figure':<32} {'trace':>10} {'simgpu':>10} {'error':>8}")
for workload, figure, trace, sim in rows:
    print(f"{workload:<20} {figure:<32} {trace:>10.3f} {sim:>10.3f} {100 * (sim - trace) / trace:>+7.2f}%")
PY
