#!/usr/bin/env bash
# bench/gpu_parts.sh: issue 48's measurements on a lent GPU machine (the input path and the compiled step),
# beside the prepared check of ../shared/gpu (its README; copied to .gpu/, whose wheels this script reuses).
#
#   bash bench/gpu_parts.sh [--cpu-smoke] [--only a,b,...] [--budget SECONDS]
#
# From the project's root. The GPU machine's python lacks omegaconf, antlr4 and submitit: the wheels of
# $WHEELS (default .gpu/wheels, the prepared check's) are installed into a temporary folder on PYTHONPATH.
# Parts, in this order, each under its own timeout and the overall deadline (--budget, default 480 s); a part
# that would start with less than it needs is skipped and said so; a failed part does not stop the others:
#   e2e      python -m bench --only end_to_end: DINO pretraining (ViT-S/16, 2 x 224 + 10 x 96, batch 64,
#            bf16-mixed, AdamW) over ImageNet-sized JPEGs with 8 and 15 workers on each data.augment_on path:
#            the step's cycle split into the data wait, the device's augmentation and the step; images/s
#   graphs   the bench's DINO step at batch 128, skip and skipless AdamW, train.compile false / true /
#            reduce-overhead (CUDA graphs): step s, images/s, MFU, compiled / eager, compilation in wall_s
#   loader   python -m bench --only loader: CPU ms per image, the loader per worker count up to the cores on
#            each path, the device's half of device_crops timed on the GPU
#   soap     the step at batch 128, skip and skipless SOAP, compile false / true
#   batches  the step at batch 64 and 256, skip AdamW, compile false / reduce-overhead
#   optim    python -m bench --only optim: one optimizer step per optim.implementation (AdamW fused, foreach,
#            loop; SOAP loop, foreach)
# Results go to $OUT (or $GPU_PARTS_RESULTS, default /tmp/gpu-parts): <part>.json (the bench's results file
# of that part), <part>.log, parts.log (the timeline). docs/results.md says what the figures were.
#
# --cpu-smoke: the same parts on the CPU at tiny sizes (`--quick`, batch 4, one model), to check the script;
# its figures mean nothing. PYTHON= names the interpreter (default python3; .venv/bin/python under --cpu-smoke).
set -uo pipefail

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
SMOKE=0
ONLY=""
BUDGET=480
while (( $# )); do
  case $1 in
    --cpu-smoke) SMOKE=1 ;;
    --only) ONLY=,$2,; shift ;;
    --budget) BUDGET=$2; shift ;;
    -h|--help) sed -n '2,27p' "$SELF"; exit 0 ;;
    *) echo "gpu_parts.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $BUDGET =~ ^[0-9]+$ ]] || { echo "gpu_parts.sh: --budget takes whole seconds, got $BUDGET" >&2; exit 2; }
[[ -f bench/__main__.py ]] || { echo "gpu_parts.sh: run it from the project's root (bench/ not found)" >&2; exit 2; }

RESULTS=${OUT:-${GPU_PARTS_RESULTS:-/tmp/gpu-parts}}
unset OUT
mkdir -p "$RESULTS" || exit 2
W=$(mktemp -d "${TMPDIR:-/tmp}/gpuparts.XXXXXX") || exit 2
if [[ -z ${PYTHON:-} && $SMOKE == 1 && -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; fi
PY=$(command -v "${PYTHON:-python3}") || { echo "gpu_parts.sh: no ${PYTHON:-python3}" >&2; exit 2; }
WHEELS=${WHEELS:-.gpu/wheels}
if ! "$PY" -c "import omegaconf, submitit" 2>/dev/null; then
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "gpu_parts.sh: omegaconf is missing and $WHEELS has no wheels (copy ../shared/gpu to .gpu first)" >&2; exit 2; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$W/site" "$WHEELS"/*.whl || exit 2
fi
export PYTHONPATH="$PWD/src:$PWD:$W/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
CAP_SCALE=1
if [[ $SMOKE == 1 ]]; then
  CAP_SCALE=3  # the CPU's parts take longer than the GPU's, as the prepared check's smoke
  QUICK=--quick; B128=4; B64=2; B256=8; TWO=skip:adamw; SOAP=skip:soap; export OMP_NUM_THREADS=1
else
  QUICK=--quick; B128=128; B64=64; B256=256; TWO=skip:adamw,skipless:adamw; SOAP=skip:soap,skipless:soap
fi
DEADLINE=$(( $(date +%s) + BUDGET ))
bench() { local part=$1; shift; "$PY" -m bench --out "$RESULTS/$part.json" "$@"; }

part_e2e()     { bench e2e --only end_to_end $([[ $SMOKE == 1 ]] && echo --quick); }
part_graphs()  { bench graphs --only pretrain $QUICK --batches $B128 --compile false,true,reduce-overhead --rows $TWO; }
part_loader()  { bench loader --only loader $([[ $SMOKE == 1 ]] && echo --quick); }
part_soap()    { bench soap --only pretrain $QUICK --batches $B128 --compile false,true --rows $SOAP; }
part_batches() { bench batches --only pretrain $QUICK --batches $B64,$B256 --compile false,reduce-overhead --rows skip:adamw; }
part_optim()   { bench optim --only optim --quick; }
export -f bench part_e2e part_graphs part_loader part_soap part_batches part_optim
export PY RESULTS SMOKE QUICK B128 B64 B256 TWO SOAP

say() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$RESULTS/parts.log"; }
run_part() {  # run_part NAME CAP NEED: at most CAP seconds, not started with less than NEED left
  local name=$1 cap=$(( $2 * CAP_SCALE )) need=$3 left rc
  if [[ -n $ONLY && $ONLY != *,$name,* ]]; then return 0; fi
  left=$(( DEADLINE - $(date +%s) ))
  if (( left < need )); then say "$name: skipped, ${left} s left, it needs ${need} s"; return 0; fi
  (( cap > left )) && cap=$left
  say "$name: start (timeout ${cap} s)"
  timeout -k 10 "$cap" bash -c "part_$name" > "$RESULTS/$name.log" 2>&1 < /dev/null
  rc=$?
  say "$name: $([[ $rc == 0 ]] && echo ok || { [[ $rc == 124 || $rc == 137 ]] && echo timeout || echo failed; }) (rc $rc)"
  [[ $rc == 0 ]] || tail -n 25 "$RESULTS/$name.log" | sed 's/^/    /' | tee -a "$RESULTS/parts.log"
}

say "gpu_parts.sh: $(git rev-parse --short HEAD 2>/dev/null), python $PY, budget ${BUDGET} s, smoke $SMOKE"
run_part e2e 240 90
run_part graphs 330 150
run_part loader 150 60
run_part soap 240 120
run_part batches 240 120
run_part optim 90 30
# the tables each part printed, for the tail of the output
for f in "$RESULTS"/{e2e,graphs,loader,soap,batches,optim}.log; do
  [[ -f $f ]] && { echo "== $(basename "$f" .log)"; grep -E '^\||^[A-Za-z].*:$' "$f" | tail -n 40; }
done
rm -rf "$W"
