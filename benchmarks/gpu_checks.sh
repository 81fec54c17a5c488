#!/usr/bin/env bash
# The GPU checks in one run, for a machine with an NVIDIA GPU, jax with its CUDA plugin and a
# CUDA build of torch (the device tool's lent machines have them):
#   1. versions, and which device guard the runtime built (C++ or torch's Python one);
#   2. the GPU tests (the examples train on XLA:GPU and match eager torch), the device
#      guard's tests and the errors-inside-backward tests;
#   3. eager CUDA autograd in a process that imported lazy_runtime, under both guards
#      (torch takes the lazy device for the process's accelerator: pytorch#161129);
#   4. the training-step benchmark against eager CUDA (RESULTS "lazy_runtime on a GPU"),
#      then where a replayed step's host time goes (profile_step.py: MLP and GPT);
#   5. the runtime's tests on XLA:GPU for SUITE_SECONDS, then their failures again on
#      XLA:CPU, which separates the GPU's failures from the installed torch version's;
#   6. decoding with a transformers Llama over a static cache (the forward replayed
#      through the cache object, one's own loop replayed whole) against eager CUDA:
#      examples/inference/decode_llama.py, where transformers is installed.
#
#   bash benchmarks/gpu_checks.sh [OUT_DIR] [SUITE_SECONDS]
#   STEPS="1 4ph 5" bash benchmarks/gpu_checks.sh ...  # some steps only (4ph: the parts of
#       a step timed, 4x: the same under XLA launch options, 4p: profiled, without step 4's
#       benchmark; 5b: step 5's failures rerun on XLA:CPU). Default: all but 4x and 6.
#   SUITE_ORDER=reverse ...   # step 5 runs the files after the first ones in reverse order
#                             # (the other half of a suite a time limit cut short before)
#   SUITE_FILES="tests/runtime/test_a.py ..." ...   # step 5 runs these files only (those
#       added since the last lease, say: git diff --name-only REV HEAD -- tests/runtime)
# Logs, and RESULTS.md after step 4, go to OUT_DIR (default /tmp/gpu_checks).
set -u
out=${1:-/tmp/gpu_checks}
suite_s=${2:-150}
py=${PYTHON:-python3}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
LAZY_RUNTIME_CACHE_DIR=$(mktemp -d)
export LAZY_RUNTIME_CACHE_DIR

steps=" ${STEPS:-1 2 3 4 4ph 4p 5 5b} "
want() { [[ $steps == *" $1 "* ]]; }
step() { echo; echo "=== $* ($(date +%T))"; }

{
  if want 1; then
  step 1 versions and guard
  nvidia-smi -L
  command -v c++ g++ || echo "no C++ compiler"
  $py -c "import sys, torch, jax; print(sys.version.split()[0], torch.__version__, \
jax.__version__, jax.devices())"
  $py -W ignore -c "from lazy_runtime import backend, native_guard; print('device guard:', \
backend.DEVICE_GUARD[0], '| hooks:', native_guard.HOOKS[0])"
  fi

  if want 2; then
  step 2 GPU, guard and error tests
  # (a file per worker, after one import has built the C++ guard: 169 s in one process on
  # 2026-11-27, most of it the examples' GPU test)
  $py -W ignore -c "import lazy_runtime"
  $py -m pytest -q -p no:cacheprovider -rfEs -n 3 --dist loadfile \
    tests/runtime/test_device_metrics.py tests/runtime/test_native_guard.py \
    tests/runtime/test_errors.py
  fi

  if want 3; then
  step 3 eager CUDA backward beside the lazy device
  for guard in 1 0; do
    LAZY_RUNTIME_NATIVE_GUARD=$guard timeout 120 $py -W ignore - <<'EOF'
import torch
from lazy_runtime import backend
x = torch.randn(8, 8, device="cuda", requires_grad=True)
try:
    (x @ x).sum().backward()
    torch.cuda.synchronize()
    print(backend.DEVICE_GUARD[0], "| eager CUDA backward: ok")
except Exception as e:  # noqa: BLE001 (a probe: report whatever torch raises)
    print(backend.DEVICE_GUARD[0], "| eager CUDA backward:", type(e).__name__,
          str(e).splitlines()[0][:200])
EOF
    echo "exit status $?"
  done
  fi
} 2>&1 | tee "$out/checks.log"

if want 4; then
  step 4 training-step benchmark 2>&1 | tee "$out/step.log"
  timeout 420 $py benchmarks/runtime_step.py --steps 10 --rounds 5 --eager-device cuda \
    --write 2>&1 | tee -a "$out/step.log"
  cp benchmarks/RESULTS.md "$out/"
fi
if want 4ph; then
  for model in mlp gpt; do
    timeout 90 $py -W ignore benchmarks/profile_step.py $model --phases --steps 30
  done 2>&1 | tee "$out/phases.log"
fi
if want 4x; then
  # the replayed MLP step's parts under XLA options that change how kernels are launched
  # (CUDA graphs: command buffers, and the smallest graph made one); an option this jax's
  # XLA lacks is named in the error
  for opts in "" "xla_gpu_graph_min_graph_size=1" "xla_gpu_enable_command_buffer="; do
    echo "--- LAZY_RUNTIME_XLA_OPTIONS='$opts'"
    LAZY_RUNTIME_XLA_OPTIONS="$opts" timeout 90 $py -W ignore benchmarks/profile_step.py \
      mlp --phases --steps 30 2>&1 | tail -3
  done 2>&1 | tee "$out/options.log"
fi
if want 4p; then
  # the replayed step's host time and the hand-written jax.jit step's, for comparison
  for model in mlp gpt; do
    for how in "" --jax; do
      timeout 90 $py -W ignore benchmarks/profile_step.py $model $how --steps 400 --top 25
    done
  done > "$out/profile.log" 2>&1
fi

if want 5; then
{
  step 5 the runtime tests on XLA:GPU for "$suite_s" s
  # first the files where XLA:GPU differed from torch before (2026-11-27), then the rest
  # (a file per worker: a lowering file compiles one graph for all its cases)
  first="test_nan_semantics test_special_values test_autocast test_complex \
test_lowerings_special test_lowerings test_lowerings_sweep test_heap"
  if [[ ${SUITE_ORDER:-} == reverse ]]; then
    first=test_nan_semantics
    files="$(printf 'tests/runtime/%s.py ' $first) $(ls tests/runtime/test_*.py | sort -r)"
  else
    files=$(printf 'tests/runtime/%s.py ' $first)
    files="$files tests/runtime"
  fi
  files=${SUITE_FILES:-$files}
  # (-v: each failure is named as it happens, should the time limit cut the summary)
  timeout -s INT -k 30 "$suite_s" $py -m pytest $files -v -n 12 --dist loadfile -rfE \
    --continue-on-collection-errors
  if want 5b; then
  step 5b their failures on XLA:CPU
  LAZY_RUNTIME_PLATFORM=cpu timeout -s INT -k 20 60 $py -m pytest tests/runtime -q -n 12 \
    --dist loadfile -rfE --lf --lfnf=none --continue-on-collection-errors
  fi
} > "$out/suite.log" 2>&1
grep -E "(FAILED|ERROR) " "$out/suite.log" | sort -u | head -40
tail -3 "$out/suite.log"
fi
if want 6; then
  {
    step 6 decoding over a static cache
    if $py -c "import transformers" 2>/dev/null; then
      timeout 180 $py -W ignore examples/inference/decode_llama.py --tokens 32 --device cuda \
        | head -2
    else
      echo "transformers is not installed: no decoding check"
    fi
  } 2>&1 | tee "$out/decode.log"
fi
echo "done $(date +%T)"
