#!/usr/bin/env bash
# The CPU's paper-scale campaign (issue 20), one home for its commands: benchmarks/campaigns/README.md,
# "A session without a GPU", says why and in what order.
#
#   bash benchmarks/campaigns/cpu_paper_scale.sh run      # first minutes of a session: train what is not done
#   bash benchmarks/campaigns/cpu_paper_scale.sh report   # before the session ends; then commit its files
#
# `run` trains the campaign's pair (`population-paper4` and its null), a seed of each at a time, seeds 0-11,
# two runs side by side on one thread each; finished runs are reused from their records, an unfinished one
# resumes from its checkpoint (on the same machine). A session's end kills it; it writes its table only when
# it finishes, so `report` rebuilds the table of the four policies the CPU has trained from the records
# (`--report-only`, no training) and the comparisons with the GPU's runs, each machine a block
# (`paired.py --block`). Then commit `benchmarks/results/cpu_paper_scale/` (the records under `results/`, the
# two tables and `paired_with_gpu.md`; `runs/` is ignored). PYTHON names the interpreter (default:
# .venv/bin/python); JOBS and THREADS (default 2 and 1) set the layout; DRY_RUN=1 prints the commands
# instead of running them (tests/test_cpu_campaign_script.py).
set -euo pipefail
cd "$(dirname "$0")/../.."

python=${PYTHON:-.venv/bin/python}
out=benchmarks/results/cpu_paper_scale
schedules=benchmarks/results/paper_scale_cifar10
gpu_table=$schedules/test/policy_quality.json
# The labels are those of the GPU's table ($gpu_table), so that paired.py finds each policy in both blocks;
# the campaign's pair first trained, then the references whose CPU seeds come after it.
pair="population-paper4=hba:$schedules/searches/population-paper4/schedule.json"
pair+=",null-population-paper4=hba:$schedules/schedules/null-population-paper4.json"
references="trivialaugment,pba=hba:$schedules/schedules/pba.json"
# Every run of the campaign: WRN-40-2, 200 epochs, 4,000 images, bfloat16 autocast (`--amp`; RESULTS.md,
# "Paper scale on the CPU"). The layout: two runs side by side on one thread each by default, never slower in
# total on the machines measured (RESULTS.md, "Two runs side by side again"): as fast as one run on two
# threads on the AMD EPYC, about 1.3x on the Xeon, whose second thread adds little. JOBS=1 THREADS=2 ends one
# run soonest (the EPYC: in half the time at the same throughput), for a run that must end before the session
# does. The thread count is not part of a run's key, so records from either layout count.
jobs=${JOBS:-2}
threads=${THREADS:-1}
quality=(benchmarks/policy_quality.py --model wrn-40-2 --epochs 200 --train-size 4000
  --seeds 0,1,2,3,4,5,6,7,8,9,10,11 --order seeds --threads "$threads" --jobs "$jobs" --num-workers 0
  --extra=--amp
  --out "$out" --keep-going)

do_run() {
  if [[ -n ${DRY_RUN:-} ]]; then
    echo "would run: $*"
  else
    "$@"
  fi
}

case ${1:-} in
  run)
    do_run nice -n 5 "$python" "${quality[@]}" --policies "$pair"
    ;;
  report)
    do_run "$python" "${quality[@]}" --policies "$references,$pair" --report-only
    do_run "$python" benchmarks/paired.py "$gpu_table" population-paper4 null-population-paper4 \
      population-paper4 trivialaugment population-paper4 pba pba trivialaugment \
      --block "$out/policy_quality.json" --out "$out/paired_with_gpu.md"
    ;;
  *)
    echo "usage: cpu_paper_scale.sh run|report (got: '${1:-}')" >&2
    exit 2
    ;;
esac
