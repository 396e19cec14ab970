# The job dispatcher of the recipes (Kaldi's cmd.sh + queue.pl/slurm.pl): how a stage's command
# runs. Sourced by scripts/recipe.sh, which calls `dispatch N NAME COMMAND...` for every stage.
#
#   --cmd local   (default) the command runs here; --nj N sets the stage's own local parallelism
#                 (features.jobs, decode.jobs for tune/decode, synth.jobs), nothing otherwise.
#   --cmd slurm   the command runs as SLURM jobs and the recipe waits for them:
#                   features        --nj array tasks (features.split.index=I of features.split.count=N,
#                                   the stage's own shares, asr/features/logmel/extract.py), then a merge job
#                                   (--dependency=afterok on the array) that joins them; the fMLLR and
#                                   i-vector kinds split their log-mel this way and fit their models
#                                   in the merge job
#                   tune, decode    --nj array tasks, each decoding one share of the set's utterances
#                                   (decode.split.index=I of decode.split.count=N, asr/decode/shares.py:
#                                   runs of consecutive utterances with about equal frames, Kaldi's
#                                   split data dirs), then a merge job joining the hypotheses (tune:
#                                   scoring every grid point over the whole dev set)
#                   train           scripts/slurm/train.sbatch (one torchrun per node); --nnodes sets
#                                   --nodes, --nproc ASR_NPROC_PER_NODE, --max-restarts ASR_MAX_RESTARTS
#                   GMM stages      (mono .. tri5, their _dev alignments and _decode) the driver runs
#                                   here, as Kaldi's steps/ scripts do (statistics summed, models
#                                   updated, trees grown), and every pass's work (alignment and
#                                   statistics, tree and LDA statistics, decoding) is a slurm array
#                                   of --nj tasks with the stage's sbatch options, each a job with its
#                                   own memory (gmm.submit=slurm, asr/gmm/jobs.py)
#                   any other stage one job: synth, prepare and the text stages have no per-file
#                                   work worth a node (prepare reads transcripts, not audio, and its
#                                   subsets need the whole corpus: the first N for dev, duplicate
#                                   counts)
#                 A failed job or task ends the recipe with one line naming the first failed task and
#                 its log file; the jobs' logs are in exp/NAME/log/<N>.<stage>.slurm/.
#   --slurm-conf FILE   sbatch options per stage (default conf/slurm.conf in the recipe dir, if any):
#                 one `KEY OPTION...` per line, `#` comments; KEY is `default` (every job), a stage
#                 name (its jobs), or `<stage>.merge` (the merge job only); a job gets the default
#                 options, then its stage's, then (merge job) the merge options; sbatch takes the
#                 last of a repeated option. Options are split at white space, never expanded.
#
# Waiting: squeue until the jobs have left the queue, then sacct for each task's state, every
# ASR_SLURM_POLL_S seconds (default 10).

cmd=local
nj=0
slurm_conf=""
declare -A slurm_options=()
# The stage's own local parallelism, set by --nj with --cmd local.
declare -A nj_knob=([synth]=synth.jobs [features]=features.jobs [tune]=decode.jobs [decode]=decode.jobs
  [decode_greedy]=decode.jobs)
for system in mono tri1 tri2 tri3 tri4 tri5; do  # the GMM stages: jobs over shares, statistics summed
  nj_knob[$system]=gmm.nj nj_knob[${system}_dev]=gmm.nj nj_knob[${system}_decode]=gmm.nj
done
# The stages split into --nj array tasks and a merge job with --cmd slurm: their split keys.
declare -A split_key=([features]=features.split [tune]=decode.split [decode]=decode.split
  [decode_greedy]=decode.split)
SLURM_TERMINAL="COMPLETED FAILED CANCELLED TIMEOUT OUT_OF_MEMORY NODE_FAIL BOOT_FAIL DEADLINE PREEMPTED REVOKED"

check_cmd_options() {
  [[ "$cmd" == local || "$cmd" == slurm ]] || usage_error "--cmd '$cmd': choose local or slurm"
  [[ "$cmd" == slurm ]] || return 0
  (( nj >= 1 )) || nj=4
  local conf=conf/slurm.conf
  [[ -z "$slurm_conf" ]] || conf=$(absolute_path "$here" "$slurm_conf")  # from where run.sh started
  if [[ -n "$slurm_conf" || -e "$conf" ]]; then  # else no per-recipe options: sbatch's defaults
    read_slurm_conf "$conf"
  fi
  command -v sbatch >/dev/null || usage_error "--cmd slurm: sbatch not found on PATH (run on a SLURM submit host)"
}

# read_slurm_conf FILE: slurm_options[KEY] = the words of KEY's lines, checked (exit 2 naming the line).
read_slurm_conf() {
  local file=$1 line key words lineno=0 word
  [[ -f "$file" && -r "$file" ]] || usage_error "--slurm-conf $file: no such readable file"
  while IFS= read -r line || [[ -n "$line" ]]; do
    lineno=$((lineno + 1))
    line=${line%%#*}
    read -r -a words <<< "$line"  # split at white space; read never globs or expands
    (( ${#words[@]} )) || continue
    key=${words[0]}
    [[ "$key" == default || -n "${stage_groups[${key%.merge}]:-}" ]] ||
      usage_error "$file:$lineno: '$key' is not a stage; use default, a stage name (${!stage_groups[*]}) or <stage>.merge"
    for word in "${words[@]:1}"; do
      [[ "$word" == -* ]] || usage_error "$file:$lineno: '$word' is not an sbatch option (--name=value)"
    done
    slurm_options[$key]+=" ${words[*]:1}"
  done < "$file"
}

# job_options KEY...: the sbatch options of the keys, in order, one per line (for mapfile).
job_options() {
  local key words
  for key in "$@"; do
    read -r -a words <<< "${slurm_options[$key]:-}"
    (( ${#words[@]} )) && printf '%s\n' "${words[@]}"
  done
  return 0
}

# dispatch N NAME COMMAND...: run a stage's command as --cmd says; the status is the stage's.
dispatch() {
  local n=$1 name=$2; shift 2
  if [[ "$cmd" == local ]]; then
    if (( nj > 0 )) && [[ -n "${nj_knob[$name]:-}" ]]; then
      "$@" "${nj_knob[$name]}=$nj"
    else
      "$@"
    fi
    return
  fi
  if [[ "${nj_knob[$name]:-}" == gmm.nj ]]; then
    slurm_gmm "$n" "$name" "$@"
    return
  fi
  local logs="$PWD/$exp_dir/log/$n.$name.slurm"
  mkdir -p "$logs"
  rm -f "$logs"/*.log
  in_flight=()
  # Interrupted while waiting: the stage's jobs would go on without anyone to use their outputs.
  trap 'cancel_in_flight; exit 130' INT
  trap 'cancel_in_flight; exit 143' TERM
  if [[ -n "${split_key[$name]:-}" ]]; then
    slurm_split_stage "$n" "$name" "$logs" "${split_key[$name]}" "$@"
  elif [[ $name == train ]]; then
    slurm_train "$n" "$name" "$logs" "$@"
  else
    slurm_single "$n" "$name" "$logs" "$@"
  fi
  trap - INT TERM
}

in_flight=()
cancel_in_flight() {
  (( ${#in_flight[@]} )) || return 0
  log "cancelling slurm jobs ${in_flight[*]}"
  scancel "${in_flight[@]}" 2>/dev/null || true
}

# job_script FILE COMMAND...: a script that runs COMMAND in the recipe dir; a word @TASK@ becomes
# the array task's index.
job_script() {
  local file=$1; shift
  {
    echo '#!/usr/bin/env bash'
    echo 'set -euo pipefail'
    printf 'cd %q\n' "$PWD"
    printf 'exec'
    printf ' %q' "$@"
    echo
  } > "$file.tmp"
  sed -i 's/@TASK@/"$SLURM_ARRAY_TASK_ID"/g' "$file.tmp"
  mv "$file.tmp" "$file"
}

# submit KEY... -- SBATCH_ARGS...: submit with the conf's options for the keys; prints the job id.
submit() {
  local keys=() options
  while [[ "$1" != -- ]]; do keys+=("$1"); shift; done
  shift
  mapfile -t options < <(job_options default "${keys[@]}")
  local out
  out=$(sbatch --parsable --chdir="$PWD" "${options[@]}" "$@") || die "sbatch ${options[*]} $* failed (exit $?)"
  printf '%s' "${out%%;*}"  # --parsable: `id` or `id;cluster`
}

# slurm_split_stage N NAME LOGS KEY COMMAND...: --nj array tasks (KEY.index=I of KEY.count=nj),
# then the merge job (KEY.count=nj alone) after all of them succeeded.
slurm_split_stage() {
  local n=$1 name=$2 logs=$3 key=$4; shift 4
  job_script "$logs/task.sh" "$@" "$key.count=$nj" "$key.index=@TASK@"
  job_script "$logs/merge.sh" "$@" "$key.count=$nj"
  local array merge
  array=$(submit "$name" -- --job-name="$name" --array="0-$((nj - 1))" --output="$logs/%a.log" "$logs/task.sh") || exit 1
  in_flight+=("$array")
  merge=$(submit "$name" "$name.merge" -- --job-name="$name.merge" --dependency="afterok:$array" \
    --kill-on-invalid-dep=yes --output="$logs/merge.log" "$logs/merge.sh") || exit 1
  in_flight+=("$merge")
  log "stage $n ($name): slurm array job $array ($nj tasks), then merge job $merge; logs in $logs/"
  wait_for_job "$n" "$name" "$array" "$logs/%a.log" "$merge"
  wait_for_job "$n" "$name" "$merge" "$logs/merge.log"
}

# slurm_gmm N NAME COMMAND...: the GMM stage's driver here, each pass's --nj jobs a slurm array
# with the stage's sbatch options (the driver submits and waits: asr/gmm/jobs.py).
slurm_gmm() {
  local n=$1 name=$2 options=() quoted=() option; shift 2
  mapfile -t options < <(job_options default "$name")
  for option in "${options[@]}"; do quoted+=("$(hydra_quote "$option")"); done
  log "stage $n ($name): the driver here, each pass's $nj jobs a slurm array"
  "$@" gmm.submit=slurm "gmm.nj=$nj" "gmm.sbatch=[$(IFS=,; echo "${quoted[*]}")]"
}

slurm_single() {
  local n=$1 name=$2 logs=$3; shift 3
  job_script "$logs/job.sh" "$@"
  local job
  job=$(submit "$name" -- --job-name="$name" --output="$logs/job.log" "$logs/job.sh") || exit 1
  in_flight+=("$job")
  log "stage $n ($name): slurm job $job; log $logs/job.log"
  wait_for_job "$n" "$name" "$job" "$logs/job.log"
}

# slurm_train: the words after `asr.train` (the overrides) go to scripts/slurm/train.sbatch.
slurm_train() {
  local n=$1 name=$2 logs=$3; shift 3
  while [[ $# -gt 0 && "$1" != asr.train ]]; do shift; done
  shift
  local extra=() job
  (( nnodes_given == 0 )) || extra+=(--nodes="$nnodes")
  (( nproc_given == 0 )) || export ASR_NPROC_PER_NODE=$nproc
  (( max_restarts_given == 0 )) || export ASR_MAX_RESTARTS=$max_restarts
  job=$(submit "$name" -- --job-name="$name" "${extra[@]}" --output="$logs/job.log" \
    "$repo_root/scripts/slurm/train.sbatch" "$@") || exit 1
  in_flight+=("$job")
  log "stage $n ($name): slurm job $job (scripts/slurm/train.sbatch); log $logs/job.log"
  wait_for_job "$n" "$name" "$job" "$logs/job.log"
}

# wait_for_job N NAME JOB LOG [DEPENDENT...]: wait until JOB (every task of an array) has ended.
# All completed: return. Else cancel the DEPENDENT jobs and end the recipe (exit 1) with one
# line naming the first failed task and its log (LOG, %a standing for the task).
wait_for_job() {
  local n=$1 name=$2 job=$3 pattern=$4 states id state code task sacct_failures=0
  shift 4
  while true; do
    if [[ -z "$(squeue -h -j "$job" -o %i 2>/dev/null)" ]]; then
      # Left the queue: sacct says how each task ended (it may lag a little behind squeue).
      if states=$(sacct -n -P -X -j "$job" --format=JobID,State,ExitCode 2>/dev/null); then
        sacct_failures=0
        all_ended "$states" && break
      elif (( ++sacct_failures >= 10 )); then
        die "stage $n ($name): sacct -j $job failed 10 times; --cmd slurm needs SLURM accounting to see how jobs ended (job log: ${pattern//%a/*})"
      fi
    fi
    sleep "${ASR_SLURM_POLL_S:-10}"
  done
  while IFS='|' read -r id state code; do
    [[ "${state%% *}" == COMPLETED ]] && continue
    task=${id#"$job"}; task=${task#_}
    (( $# == 0 )) || scancel "$@" 2>/dev/null || true
    log "ERROR: stage $n ($name) failed: slurm job $id ${state%% *} (exit $code); its log: ${pattern//%a/$task}"
    exit 1
  done < <(sort -t'|' -k1,1V <<< "$states")
  return 0
}

# all_ended SACCT_LINES: every line's state is a final one (and there is at least one line).
all_ended() {
  local id state code any=false
  while IFS='|' read -r id state code; do
    [[ -n "$id" ]] || continue
    any=true
    [[ " $SLURM_TERMINAL " == *" ${state%% *} "* ]] || return 1
  done <<< "$1"
  [[ $any == true ]]
}
