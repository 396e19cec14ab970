# Shared shell for recipes: option parsing, logging and the stage runner.
# Source it from recipes/<corpus>/run.sh; see recipes/mini/run.sh for the pattern.
#
# Options every recipe takes:
#   --stage N --stop-stage M    run stages N..M (default: all)
#   --exp NAME                  experiment name -> exp/NAME (default: base)
#   --nproc N                   training processes per node (torchrun); 1 = plain python
#   --nnodes N --node-rank K --rdzv-endpoint HOST:PORT   several machines (torchrun)
#   --max-restarts N            torchrun restarts a failed training job N times (it resumes
#                               from its last checkpoint); default 0
#   --force                     re-run stages even if their .done marker exists
#   anything else               a Hydra override passed to every stage (key=value)

set -euo pipefail

# Use the project's virtual environment (made by `make install`) unless one is active.
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z "${VIRTUAL_ENV:-}" && -x "$repo_root/.venv/bin/python" ]]; then
  export PATH="$repo_root/.venv/bin:$PATH"
fi

stage=0
stop_stage=1000
exp=base
nproc=1
nnodes=1
node_rank=0
rdzv_endpoint=""
max_restarts=0
force=false
overrides=()
declare -A recipe_opts=()

log() { echo "$(date '+%Y-%m-%d %H:%M:%S') [$(basename "$PWD")] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Recipe-specific options: declare them with `recipe_option NAME DEFAULT` before
# parse_options; `--name value` then sets the shell variable NAME (dashes -> underscores).
recipe_option() { recipe_opts[$1]=1; printf -v "$1" '%s' "$2"; }

parse_options() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --stage) stage=$2; shift 2 ;;
      --stop-stage|--stop_stage) stop_stage=$2; shift 2 ;;
      --exp) exp=$2; shift 2 ;;
      --nproc) nproc=$2; shift 2 ;;
      --nnodes) nnodes=$2; shift 2 ;;
      --node-rank) node_rank=$2; shift 2 ;;
      --rdzv-endpoint) rdzv_endpoint=$2; shift 2 ;;
      --max-restarts) max_restarts=$2; shift 2 ;;
      --force) force=true; shift ;;
      -h|--help) usage; exit 0 ;;
      --*)
        local name=${1#--}; name=${name//-/_}
        [[ -n "${recipe_opts[$name]:-}" ]] || die "unknown option $1 (see --help)"
        [[ $# -ge 2 ]] || die "option $1 needs a value"
        printf -v "$name" '%s' "$2"; shift 2 ;;
      *=*) overrides+=("$1"); shift ;;
      *) die "unexpected argument '$1': options start with --, Hydra overrides look like key=value" ;;
    esac
  done
  overrides=("exp_name=$exp" "${overrides[@]}")
  exp_dir=exp/$exp
  mkdir -p "$exp_dir/.done"
  # The exact command line of every run, for the record.
  echo "$(date '+%Y-%m-%d %H:%M:%S') $0 ${RECIPE_ARGS[*]:-}" >> "$exp_dir/commands.log"
}

# override_value KEY DEFAULT: the value a `KEY=value` override sets, else DEFAULT (last wins).
override_value() {
  local key=$1 value=$2 o
  for o in "${overrides[@]}"; do
    [[ "$o" == "$key="* ]] && value=${o#*=}
  done
  echo "$value"
}

# run_stage N NAME command...: run when N is inside [stage, stop_stage] and not done yet.
# The marker is written only after the command succeeded, so an interrupted stage re-runs.
run_stage() {
  local n=$1 name=$2; shift 2
  (( n >= stage && n <= stop_stage )) || return 0
  local marker="$exp_dir/.done/$n.$name"
  if [[ -f "$marker" && "$force" != true ]]; then
    log "stage $n ($name): done already ($marker), skipping"
    return 0
  fi
  log "stage $n ($name): $*"
  echo "$*" > "$exp_dir/.done/$n.$name.cmd"
  local start=$SECONDS
  "$@" || die "stage $n ($name) failed; fix the problem above and re-run with --stage $n"
  date '+%Y-%m-%d %H:%M:%S' > "$marker"
  log "stage $n ($name): finished in $((SECONDS - start)) s"
}

# The training launcher: plain python for one process, torchrun otherwise.
train_launcher() {
  if (( nproc == 1 && nnodes == 1 )); then
    echo python -m
  elif (( nnodes == 1 )); then
    echo torchrun --standalone --nproc-per-node "$nproc" --max-restarts "$max_restarts" -m
  else
    [[ -n "$rdzv_endpoint" ]] || die "--nnodes $nnodes needs --rdzv-endpoint HOST:PORT"
    echo torchrun --nnodes "$nnodes" --node-rank "$node_rank" --nproc-per-node "$nproc" \
      --max-restarts "$max_restarts" --rdzv-backend c10d --rdzv-endpoint "$rdzv_endpoint" -m
  fi
}

# corpus_overrides START_DIR data=GROUP key=value...: select the data group and set data.<key>
# for each corpus option given (relative paths are taken from START_DIR, where run.sh was
# started). A value with spaces is a list (--fisher-dirs "A B"). The data group goes before the
# user's overrides, the paths after them.
corpus_overrides() {
  local start=$1 group=$2 kv key value path list; shift 2
  overrides=("${overrides[0]}" "$group" "${overrides[@]:1}")
  for kv in "$@"; do
    key=${kv%%=*}; value=${kv#*=}
    [[ -n "$value" ]] || continue
    list=()
    for path in $value; do
      [[ "$path" == /* ]] || path="$start/$path"
      list+=("'$path'")
    done
    if [[ "$key" == *_dirs ]]; then
      overrides+=("data.$key=[$(IFS=,; echo "${list[*]}")]")
    else
      overrides+=("data.$key=${list[0]}")
    fi
  done
}

# decode_options: --decode beam_lm|greedy and --score hub5|jiwer, for recipes that end in a WER.
decode_options() {
  recipe_option decode beam_lm   # beam_lm: CTC beam search with the word LM; greedy: best path
  recipe_option score hub5       # hub5: stm/CTM/GLM with NIST SCTK (native Python without it); jiwer: Kaldi text
}

# decode_stages FIRST: tune (beam_lm only), decode and score as stages FIRST..FIRST+2. With the
# LM, greedy decoding is scored too (decode_<set>_greedy/, seconds), to show what the LM brings.
decode_stages() {
  local n=$1
  if [[ $decode == beam_lm ]]; then
    run_stage $n tune   python -m asr.decode.tune decode=beam_lm "${overrides[@]}"
  fi
  run_stage $((n + 1)) decode python -m asr.decode decode=$decode "${overrides[@]}"
  run_stage $((n + 2)) score  python -m asr.score score=$score "${overrides[@]}"
  if [[ $decode == beam_lm ]]; then
    run_stage $((n + 1)) decode_greedy python -m asr.decode decode=greedy decode.dir_suffix=_greedy "${overrides[@]}"
    run_stage $((n + 2)) score_greedy  python -m asr.score score=$score decode.dir_suffix=_greedy "${overrides[@]}"
  fi
  last_stage=$((n + 2))
}

# switchboard_stages: the stages of the real-corpus recipes (swb300, swb2000), after
# corpus_overrides has pointed the data group at the corpus.
switchboard_stages() {
  local data
  data=$(override_value data.data_dir data)
  run_stage 0 prepare   python -m asr.data.prepare "${overrides[@]}"
  run_stage 1 validate  python -m asr.data.validate $data/$(override_value data.train_set train_nodup) \
                          $data/$(override_value data.dev_set train_dev) $data/$(override_value data.eval_set eval2000)
  run_stage 2 features  python -m asr.features "${overrides[@]}"
  run_stage 3 tokenizer python -m asr.text "${overrides[@]}"
  run_stage 4 lm        python -m asr.lm "${overrides[@]}"
  run_stage 5 train     $(train_launcher) asr.train "${overrides[@]}"
  decode_stages 6
  show_wer
}

# show_wer: print the eval set's WER tables after the score stage (decode_stages ran).
show_wer() {
  local eval_set wer
  eval_set=$(override_value data.eval_set eval2000)
  (( stop_stage >= last_stage )) || return 0
  wer="$exp_dir/decode_${eval_set}_greedy/wer.md"
  if [[ $decode == beam_lm && -f "$wer" ]]; then
    log "WER on $eval_set, greedy decoding (no LM), $score scoring ($wer):"
    cat "$wer"
  fi
  wer="$exp_dir/decode_$eval_set/wer.md"
  if [[ -f "$wer" ]]; then
    log "WER on $eval_set, $decode decoding, $score scoring ($wer):"
    cat "$wer"
  fi
}
