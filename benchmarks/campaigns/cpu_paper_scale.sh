#!/usr/bin/env bash
# The CPU's paper-scale campaign (issue 20), one home for its commands: benchmarks/campaigns/README.md,
# "A session without a GPU", says why and in what order.
#
#   bash benchmarks/campaigns/cpu_paper_scale.sh run      # first minutes of a session: train what is not done
#   bash benchmarks/campaigns/cpu_paper_scale.sh report   # before the session ends; then commit its files
#
# `run` trains what the campaign asks now: the 2x2's two amount cells (`null-population-paper4`'s ops with
# `population-paper4`'s amount, and the reverse; RESULTS.md, "Seeds 4 and 5: the search beats its null"), seeds
# 0-2, a seed of each at a time, one run at a time on both cores; then `population-paper4`'s ops with PBA's
# schedule's amount over time and PBA's schedule itself, seeds 0-2 (RESULTS.md, "The 2x2's seed 1": does the
# search's mix beat PBA's under PBA's amount?). The pair itself (`population-paper4` and its
# null, seeds 0-5) was decided at its sixth look and is not trained further. Finished runs are reused from
# their records; an unfinished one resumes from its checkpoint (in the same checkout). When `run` finishes it
# runs `report`. A session's end kills it, and then `report` rebuilds the tables from the records
# (`--report-only`, no training): the table of every policy the CPU has trained; the comparisons with the
# GPU's runs, each machine a block (`paired.py --block`, `paired_with_gpu.md`); and the 2x2 on the CPU
# alone, each amount cell against the pair and the two main effects (`paired.py --contrast`,
# `amount_2x2.md`); and the PBA-amount cell against PBA's schedule, the search and TrivialAugment
# (`pba_amount.md`). Then commit `benchmarks/results/cpu_paper_scale/` (the records under `results/`, the
# tables; `runs/` is ignored). `run` first refuses a CPU whose bfloat16 is slow (below). PYTHON names the interpreter (default: .venv/bin/python). JOBS and THREADS
# (default 1 and 2) set the layout. TIMEOUT=SECONDS ends `run`'s training by then, so that a session can
# start it with the time it has left: no run starts with less than MIN_RUN_SECONDS left (default 4500; one
# run took 3,481-6,752 s on the Xeons), and one still going then is stopped, to resume from its checkpoint
# in the same checkout (policy_quality.py --timeout, --min-run-seconds). DRY_RUN=1 prints the commands instead
# of running them (tests/test_cpu_campaign_script.py).
set -euo pipefail
cd "$(dirname "$0")/../.."

python=${PYTHON:-.venv/bin/python}
out=benchmarks/results/cpu_paper_scale
schedules=benchmarks/results/paper_scale_cifar10
gpu_table=$schedules/test/policy_quality.json
# The pair's and references' labels are those of the GPU's table ($gpu_table), so that paired.py finds each
# policy in both blocks; the amount cells are the CPU's alone (the GPU's plan queues them as `test-amount`).
search=population-paper4
null=null-population-paper4
search_amount=$null-amount-of-$search    # the null's ops with the search's amount
null_amount=$search-amount-of-$null      # the search's ops with the null's amount
pair="$search=hba:$schedules/searches/$search/schedule.json,$null=hba:$schedules/schedules/$null.json"
cells="$search_amount=hba:$schedules/schedules/$search_amount.json"
cells+=",$null_amount=hba:$schedules/schedules/$null_amount.json"
pba="pba=hba:$schedules/schedules/pba.json"
references="trivialaugment,$pba"
pba_amount=$search-amount-of-pba         # the search's ops with PBA's schedule's amount
pba_cell="$pba_amount=hba:$schedules/schedules/$pba_amount.json"
pba_stage="$pba,$pba_cell"
# Every run of the campaign: WRN-40-2, 200 epochs, 4,000 images, bfloat16 autocast (`--amp`; RESULTS.md,
# "Paper scale on the CPU"). The layout: one run at a time on both cores by default. Two side by side were
# never slower in total (RESULTS.md, "Two runs side by side again"), but on the Xeon a pair of them outlasts a
# session, and a checkout starts without the last one's checkpoints (RESULTS.md, "Seeds 4 and 5"); one run
# on two threads ends within a session. The thread count is not part of a run's key, so records from either
# layout count.
jobs=${JOBS:-1}
threads=${THREADS:-2}
quality=(benchmarks/policy_quality.py --model wrn-40-2 --epochs 200 --train-size 4000
  --order seeds --threads "$threads" --jobs "$jobs" --num-workers 0
  --extra=--amp
  --out "$out" --keep-going)
# The rule reads three seeds of each cell; the report shows every seed the pair has.
cell_seeds=0,1,2
all_seeds=0,1,2,3,4,5,6,7,8,9,10,11

do_run() {
  if [[ -n ${DRY_RUN:-} ]]; then
    echo "would run: ${*@Q}"  # each argument quoted, as shlex.split reads it
  else
    "$@"
  fi
}

report() {
  do_run "$python" "${quality[@]}" --seeds "$all_seeds" --policies "$references,$pair,$cells,$pba_cell" --report-only
  do_run "$python" benchmarks/paired.py "$gpu_table" $search $null $search trivialaugment $search pba \
    pba trivialaugment --block "$out/policy_quality.json" --out "$out/paired_with_gpu.md"
  do_run "$python" benchmarks/paired.py "$out/policy_quality.json" $search_amount $null $search_amount $search \
    $null_amount $search $null_amount $null \
    --contrast "$search+$search_amount=$null+$null_amount" --contrast "$search+$null_amount=$null+$search_amount" \
    --out "$out/amount_2x2.md"
  do_run "$python" benchmarks/paired.py "$out/policy_quality.json" $pba_amount pba $pba_amount $search \
    $pba_amount trivialaugment --out "$out/pba_amount.md"
}

# Every run trains with --amp; on a CPU without bfloat16 matrix instructions that is some 30x slower than
# float32 (RESULTS.md, "An AVX2-only CPU": no epoch in 9 minutes), so `run` stops there before it starts.
check_bf16() {
  local why="every run here trains with --amp: not starting (RESULTS.md, An AVX2-only CPU)"
  do_run "$python" -c "import sys; from hba_augment._runner import SLOW_BF16, cpu_bf16_slowdown as f; s = f(); \
sys.exit(f'cpu_paper_scale.sh: a bfloat16 matrix product takes {s:.0f}x a float32 one here; $why' if s > SLOW_BF16 else 0)"
}

case ${1:-} in
  run)
    check_bf16
    # The cells first, all their seeds, then the PBA-amount stage; finished runs are reused, so each session
    # starts where the last one's records end.
    for stage in "$cells" "$pba_stage"; do
      # A session's end kills a run and loses it, unless the next session has this checkout; a run not
      # started costs nothing. Each stage gets what is left of TIMEOUT ($SECONDS: since the script started).
      limits=()
      if [[ -n ${TIMEOUT:-} ]]; then
        left=$((TIMEOUT - SECONDS))
        limits=(--timeout "$((left > 0 ? left : 0))" --min-run-seconds "${MIN_RUN_SECONDS:-4500}")
      fi
      do_run nice -n 5 "$python" "${quality[@]}" "${limits[@]}" --seeds "$cell_seeds" --policies "$stage"
    done
    report
    ;;
  report)
    report
    ;;
  *)
    echo "usage: cpu_paper_scale.sh run|report (got: '${1:-}')" >&2
    exit 2
    ;;
esac
