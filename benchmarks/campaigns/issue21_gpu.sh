#!/usr/bin/env bash
# Issue 21's GPU figures in one device call, most decisive first, within a budget of seconds.
#
# On the lent GPU, from the repository root, with `carry: [".device/data/cifar-10-batches-py"]` (the
# lossless batches: the CUDA tests, the throughput rows and the timed trainings read them):
#
#   bash benchmarks/campaigns/issue21_gpu.sh <commit> [budget_s] [step ...]
#
# Steps run in the order below (or the order given) with their own time limits; a step whose limit no
# longer fits in what is left of the budget is skipped and named at the end, so a later call can pass just
# those. Every log and table goes under $OUT; $OUT/issue21_summary.txt says what ran, its exit status and
# seconds. DRY_RUN=1 prints the plan instead (here, on the CPU: tests/test_campaign_scripts.py).
# What each step measures, and the targets: benchmarks/campaigns/README.md, "Issue 21's GPU figures".
set -uo pipefail

commit=${1:?usage: issue21_gpu.sh <commit> [budget_s] [step ...]}
budget=${2:-540}
shift $(( $# < 2 ? $# : 2 ))
out=${OUT:?OUT must name the folder the results go to}
data=${HBA_DATA_DIR:-$PWD/.device/data}
export HBA_DATA_DIR=$data

# Each step's time limit (s) and command. The limits are estimates from earlier leases (benchmarks/RESULTS.md)
# with room: a row of cuda_throughput.py compiles per shape (about a minute), a 200-epoch WRN-40-2 training
# took 125-145 s plain on an H100, fused_models.py steps 29 networks' worth 35 times in each of its 5 modes
# (about 20 ms each alone), and its two captured modes capture per network count. fused_models comes second:
# it says why fusing pays or does not (speed_fused below decides the campaign's layout); train_fused8, eight seeds of the 200-epoch training
# fused in one process, gives the wall time a campaign needs (its history.jsonl
# says each epoch's time even if the limit cuts it short); fused_models_nchw, the same without channels-last
# (cuDNN's grouped convolutions may be faster in NCHW); index_dtype, last and short, whether int32 indices
# would make the uint8 call's lookup and histogram cheaper on a GPU (on the CPU they are slower). Not in the
# default order, named by a call that wants them: cuda_fused_tests, the CUDA tests of fused training alone (a
# fused campaign's gate; cuda_tests runs them too, among the rest); speed_fused, the campaign's own layout for test-seeds3-11
# probed fused (3 processes of 9 seeds each, 5 epochs per mode), and pick_fused, which compares it with the
# H200's committed probe of 8 plain processes and writes the gpu_campaign.py options it chooses to flags.txt
# (empty: fusing does not pay there); lookup_kernel, whether the int32 flat lookup that the CPU takes for large
# batches (lookup_kernel.py) would pay on the GPU too. The commands of a family share a helper: (grid, name[, options]) for the
# compiled rows, (name[, option]) for the others.
throughput="python3 benchmarks/cuda_throughput.py --commit $commit"
compiled() { echo "$throughput --grid $1 --compile${3:+ $3} --out $out/cuda_compiled_$2"; }
search_cost() {
  echo "python3 benchmarks/search_cost.py --device cuda --data-dir $data --warmup 8 --steps 16${2:+ $2} --out $out/$1"
}
train() {
  echo "python3 -m hba_augment train --dataset cifar10 --data-dir $data --train-size 4000 --preset cifar10
    --model wrn-40-2 --policy hba:cifar10 --epochs 200 --amp --device cuda --num-workers 2 --no-progress${2:+ $2}
    --out $out/$1"
}
# What inductor writes is decided by two rules whose CPU values differ from a GPU's: the CPU's, timed on the GPU.
cpu_rules='--compile-options {"options":{"realize_opcount_threshold":50,"realize_acc_reads_threshold":12}}'
declare -A limit=([cuda_tests]=90 [fused_models]=200 [train_fused8]=240 [fused_models_nchw]=90 [compiled_224]=150 [compiled_32_65536]=150 [compiled_32_1024]=120
  [search_cost]=120 [search_cost_graphs]=120 [train_plain]=220 [train_cuda_graphs]=220 [train_compile]=240
  [eager_grid]=120 [compiled_224_t4]=150 [compiled_224_cpu_rules]=150 [index_dtype]=40
  [cuda_fused_tests]=60 [speed_fused]=200 [pick_fused]=20 [lookup_kernel]=40)
declare -A run=(
  [cuda_tests]="python3 -m pytest -q -p no:cacheprovider -m cuda"
  [fused_models]="python3 benchmarks/fused_models.py --device cuda --amp --channels-last --members 1,4,8,16
    --steps 10 --commit $commit --out $out/fused_models"
  [fused_models_nchw]="python3 benchmarks/fused_models.py --device cuda --amp --modes loop,grouped --members 1,8,16
    --steps 10 --commit $commit --out $out/fused_models_nchw"
  [train_fused8]=$(train 'train_fused8/seed{seed}' '--seed 0,1,2,3,4,5,6,7 --fuse --checkpoint-every 0 --eval-every 0')
  [compiled_224]=$(compiled 224:1024 224_1024)
  [compiled_32_65536]=$(compiled 32:65536 32_65536)
  [compiled_32_1024]=$(compiled 32:1024 32_1024)
  [search_cost]=$(search_cost search_cost)
  [search_cost_graphs]=$(search_cost search_cost_graphs --cuda-graphs)
  [train_plain]=$(train train_plain)
  [train_cuda_graphs]=$(train train_cuda_graphs --cuda-graphs)
  [train_compile]=$(train train_compile --compile)
  [eager_grid]="$throughput --out $out/cuda_throughput"
  [compiled_224_t4]=$(compiled 224:1024 224_1024_t4 '--compile-options {"options":{"realize_reads_threshold":4}}')
  [compiled_224_cpu_rules]=$(compiled 224:1024 224_1024_cpu_rules "$cpu_rules")
  [index_dtype]="python3 benchmarks/index_dtype.py --device cuda --out $out/index_dtype"
  [lookup_kernel]="python3 benchmarks/lookup_kernel.py --device cuda --out $out/lookup_kernel"
  [cuda_fused_tests]="python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_fused.py tests/test_fused_population.py"
  [speed_fused]="python3 benchmarks/train_speed.py --dataset cifar10 --data-dir $data --procs 3 --lanes 9 --fuse
    --epochs graphs=5,eager=5 --timeout 90 --out $out/speed_fused"
  [pick_fused]="python3 benchmarks/pick_layout.py benchmarks/results/cuda/train_speed_lanes_base.json
    $out/speed_fused.json --epochs 200 --plan benchmarks/campaigns/paper_scale_cifar10.json --max-lanes 9 --fit 490
    --out $out/flags.txt"
)
order=(cuda_tests fused_models train_fused8 fused_models_nchw compiled_224 compiled_32_65536 compiled_32_1024 search_cost search_cost_graphs train_plain
  train_cuda_graphs train_compile eager_grid compiled_224_t4 compiled_224_cpu_rules index_dtype)
(( $# )) && order=("$@")
for name in "${order[@]}"; do
  [[ -n ${limit[$name]:-} ]] || { echo "unknown step: $name (steps: ${!limit[*]})" >&2; exit 2; }
done

summary=$out/issue21_summary.txt
mkdir -p "$out"
start=$SECONDS
if [[ -z ${DRY_RUN:-} ]]; then
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
fi
skipped=()
for name in "${order[@]}"; do
  left=$(( budget - (SECONDS - start) ))
  if (( left < limit[$name] )); then
    skipped+=("$name")
    continue
  fi
  if [[ -n ${DRY_RUN:-} ]]; then
    echo "would run $name (at most ${limit[$name]} s): ${run[$name]}"
    start=$(( start - limit[$name] ))  # as if it took all of its limit
    continue
  fi
  began=$SECONDS
  # shellcheck disable=SC2086  # the command is words on purpose
  timeout "${limit[$name]}" ${run[$name]} > "$out/$name.log" 2>&1
  status=$?
  echo "$name: exit $status, $(( SECONDS - began )) s" | tee -a "$summary"
  tail -3 "$out/$name.log"
done
if (( ${#skipped[@]} )); then
  line="skipped for want of time: ${skipped[*]}"
  if [[ -n ${DRY_RUN:-} ]]; then echo "$line"; else echo "$line" | tee -a "$summary"; fi
fi
