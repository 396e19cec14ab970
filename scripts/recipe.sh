# Shared shell for recipes: option parsing, logging and the stage runner.
# Source it from recipes/<corpus>/run.sh; see recipes/mini/run.sh for the pattern.
#
# Options every recipe takes:
#   --stage N --stop-stage M    run stages N..M (default: all). The numbers are the same in every
#                               recipe (docs/recipes.md): 0 prepare .. 8 score; mini's synthesis is -1
#   --exp NAME                  experiment name -> exp/NAME (default: base)
#   --nproc N                   training processes per node (torchrun); 1 = plain python
#   --nnodes N --node-rank K --rdzv-endpoint HOST:PORT   several machines (torchrun)
#   --local-addr ADDRESS        this machine's address for the rendezvous (torchrun's --local-addr),
#                               when its host name does not resolve to the address the others reach
#   --max-restarts N            torchrun restarts a failed training job N times (it resumes
#                               from its last checkpoint); default 0
#   --cmd local|slurm --nj N    where the stages run, and in how many parts (scripts/cmd.sh)
#   --slurm-conf FILE           sbatch options per stage (default conf/slurm.conf; scripts/cmd.sh)
#   --data-root DIR             data/, feats/ and lang/ live in DIR: the recipe dir gets
#                               symbolic links to them (another disk)
#   --exp-root DIR              the same for exp/
#   --config FILE               options read before the command line's (default: db.conf in the
#                               recipe dir, if there is one); see read_config_file
#   --force                     re-run the stages in range even if their records say done
#   anything else               a Hydra override passed to every stage (key=value)
#
# Every option value is one word from the command line to the stage it reaches: paths may hold
# spaces, quotes, $ or glob characters (corpus paths are quoted for Hydra by hydra_quote).
# Numeric options must be integers and are checked before use, never evaluated as shell code.
# A mistake in the options exits with status 2; a failed stage exits with that stage's status.
#
# Stage records: a stage that finished has exp/NAME/.done/<N>.<stage>.record.json, the options
# it ran with, the files it read and those it wrote, taken from the records the stage itself
# wrote (see "stage records" below, and docs/architecture.md#stage-records). A re-run skips a
# stage whose options and inputs are the same and whose outputs are there; otherwise it says
# what changed and runs the stage again, and so the stages that read what it remade. The
# stages whose outputs experiments share keep their record in data/.done/ too, so a new --exp
# skips them.

set -euo pipefail

# Use the project's virtual environment (made by `make install`) unless one is active.
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z "${VIRTUAL_ENV:-}" && -x "$repo_root/.venv/bin/python" ]]; then
  export PATH="$repo_root/.venv/bin:$PATH"
fi

stage=-1  # the first stage: mini's synthesis; the LDC recipes start at 0 (prepare)
stop_stage=1000
exp=base
nproc=1
nnodes=1
node_rank=0
rdzv_endpoint=""
max_restarts=0
force=false
nproc_given=0
nnodes_given=0
max_restarts_given=0
local_addr=""
data_root=""
exp_root=""
data_root_dirs=(data feats lang)  # what --data-root moves
overrides=()
experiment_groups=""  # the config groups an experiment= override sets (parse_options)
default_experiment=""  # the recipe's experiment when none is given (the Switchboard recipes: the paper's system)
declare -A recipe_opts=()
declare -A recipe_list_opts=()
corpus_paths=()
corpus_lists=()

. "$repo_root/scripts/cmd.sh"

log() { echo "$(date '+%Y-%m-%d %H:%M:%S') [$(basename "$PWD")] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage_error() { log "ERROR: $* (see --help)"; exit 2; }
# --help: the recipe's opening comment, whole (run.sh is in the current dir: recipes cd there).
usage() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$(basename "$0")"; }
LAST_STAGE=8  # score: the last stage of every recipe (docs/recipes.md)

# Recipe-specific options: declare them with `recipe_option NAME DEFAULT` before
# parse_options; `--name value` then sets the shell variable NAME (dashes -> underscores).
recipe_option() { recipe_opts[$1]=1; printf -v "$1" '%s' "$2"; }
# `recipe_list_option NAME`: `--name value` may be given several times; NAME is an array.
recipe_list_option() { recipe_list_opts[$1]=1; declare -g -a "$1"; local -n list=$1; list=(); }
# Corpus locations, relative to where run.sh was started; they become data.NAME overrides.
# `corpus_option NAME`: one path. `corpus_list_option NAMES NAME`: --NAMES "A B" (a list split
# at white space, never globbed) and --NAME PATH, repeatable, for paths with white space.
corpus_option() { recipe_option "$1" ""; corpus_paths+=("$1"); }
corpus_list_option() { recipe_option "$1" ""; recipe_list_option "$2"; corpus_lists+=("$1:$2"); }

# integer_option VAR VALUE: set VAR to VALUE if it is a non-negative integer (base 10), else
# exit 2. The value is checked as text before any arithmetic sees it.
integer_option() {
  [[ "$2" =~ ^[0-9]{1,9}$ ]] || usage_error "--${1//_/-} '$2': expected a non-negative integer"
  printf -v "$1" '%d' "$((10#$2))"
}

# stage_number_option VAR VALUE: as integer_option, but -1 (mini's synthesis) is a stage too.
stage_number_option() {
  if [[ "$2" == -1 ]]; then printf -v "$1" '%d' -1; return; fi
  [[ "$2" =~ ^[0-9]{1,9}$ ]] || usage_error "--${1//_/-} '$2': expected a stage number (-1 or more)"
  printf -v "$1" '%d' "$((10#$2))"
}

parse_options() {
  local name value
  read_config_file "$@"
  set -- "${config_args[@]}" "$@"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --force) force=true; shift; continue ;;
      -h|--help) usage; exit 0 ;;
      --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;  # --stage=3 is --stage 3
    esac
    case "$1" in
      --*)
        [[ $# -ge 2 ]] || usage_error "option $1 needs a value"
        name=${1#--}; name=${name//-/_}; value=$2; shift 2 ;;
      *=*) overrides+=("$1"); shift; continue ;;
      *) usage_error "unexpected argument '$1': options start with --, Hydra overrides look like key=value" ;;
    esac
    case "$name" in
      stage|stop_stage) stage_number_option "$name" "$value" ;;
      node_rank|nj) integer_option "$name" "$value" ;;
      nproc|nnodes|max_restarts|hybrid_leaves) integer_option "$name" "$value"; printf -v "${name}_given" 1 ;;
      exp) exp=$value ;;
      rdzv_endpoint|local_addr|cmd|slurm_conf|data_root|exp_root) printf -v "$name" '%s' "$value" ;;
      config) ;;  # read first, by read_config_file
      *)
        if [[ -n "${recipe_list_opts[$name]:-}" ]]; then
          local -n list=$name; list+=("$value"); unset -n list
        elif [[ -n "${recipe_opts[$name]:-}" ]]; then
          printf -v "$name" '%s' "$value"
        else
          usage_error "unknown option --${name//_/-}"
        fi ;;
    esac
  done
  check_options
  [[ -z "$default_experiment" || -n $(override_value experiment "") ]] || overrides=("experiment=$default_experiment" "${overrides[@]}")
  check_overrides
  link_root "$data_root" "${data_root_dirs[@]}"
  link_root "$exp_root" exp
  overrides=("exp_name=$(hydra_quote "$exp")" "${overrides[@]}")
  # The groups an experiment= override sets (the last one wins, as in Hydra): stage_options.
  local experiment
  experiment=$(override_value experiment "")
  [[ -z "$experiment" ]] || experiment_groups=$(python -m asr.utils.experiment_groups "$experiment")
  exp_dir=exp/$exp
  mkdir -p "$exp_dir/.done"
  lock_experiment
  log_command "$PWD/$exp_dir/commands.log"
}

# log_command FILE: the exact command line of every run, replayable (`bash -c "$(tail -1
# commands.log | cut -f2)"`), then how it ended: `exit N` when run.sh exits, `killed` (written by
# the next run) when it never got to say.
log_command() {
  [[ ! -s $1 || -z $(tail -c1 "$1") ]] || printf '\tkilled\n' >> "$1"
  printf '%s\t%s' "$(date '+%Y-%m-%d %H:%M:%S')" "$(replayable_command)" >> "$1"
  commands_log=$1
  trap 'printf "\texit %d\n" "$?" >> "$commands_log"' EXIT
}

# One run.sh at a time per experiment (per node rank in a multi-node job, whose machines run the
# same command on a shared experiment dir): a second would run the same stages into the same files.
# flock's lock belongs to the open file, which the stages inherit: it is held while any of them
# runs, and the kernel drops it when the last one ends, so a killed run leaves no stale lock.
lock_experiment() {
  command -v flock >/dev/null || { log "flock (util-linux) not found: runs of exp/$exp are not kept apart"; return 0; }
  # The machines of one multi-node job share the experiment dir: one lock per node rank.
  local lock="$exp_dir/.run.lock" whose="another run.sh"
  if (( nnodes > 1 )); then
    lock="$exp_dir/.run.node$node_rank.lock" whose="another run.sh of node rank $node_rank"
  fi
  exec 8>>"$lock"
  # A few seconds' grace: the stages of a run just killed still hold the lock while they exit.
  # ASR_RUN_LOCK_WAIT_S (default 5) is for the tests, which wait less to see a run refused.
  if ! flock -w "${ASR_RUN_LOCK_WAIT_S:-5}" 8; then
    log "ERROR: $lock: exp/$exp is in use by $whose ($(head -1 "$lock" 2>/dev/null || echo unknown)); wait for it or stop it, or use another --exp"
    exit 2
  fi
  printf 'pid %s on %s since %s\n' "$$" "$(hostname)" "$(date '+%Y-%m-%d %H:%M:%S')" > "$lock"
}

# check_overrides: every key=value of the command line (and of --config) names a config key or
# a group's choice, checked before any stage runs, whatever stages are skipped.
check_overrides() {
  (( ${#overrides[@]} )) || return 0
  local problems
  problems=$(python -m asr.overrides "${overrides[@]}") && return 0
  [[ -n "$problems" ]] || die "could not check the overrides (python -m asr.overrides failed)"
  while IFS= read -r line; do log "ERROR: $line"; done <<< "$problems"
  log "fix the override(s) above (python -m asr.<stage> --help lists a stage's keys)"
  exit 2
}

check_options() {
  [[ -n "$exp" && "$exp" != */* && "$exp" != . && "$exp" != .. ]] || usage_error "--exp '$exp': a name, not a path"
  (( stage <= stop_stage )) || usage_error "--stage $stage is after --stop-stage $stop_stage"
  (( stage <= LAST_STAGE )) || usage_error "--stage $stage: the last stage is $LAST_STAGE (score)"
  (( nproc >= 1 && nnodes >= 1 )) || usage_error "--nproc and --nnodes must be at least 1"
  (( node_rank < nnodes )) || usage_error "--node-rank $node_rank: must be below --nnodes $nnodes"
  (( nnodes == 1 )) || [[ -n "$rdzv_endpoint" ]] || usage_error "--nnodes $nnodes needs --rdzv-endpoint HOST:PORT"
  [[ -z "${recipe_opts[decode]:-}" ]] || check_decode_options
  [[ -z "${recipe_opts[speed_perturb]:-}" || $speed_perturb == true || $speed_perturb == false ]] ||
    usage_error "--speed-perturb '$speed_perturb': true or false"
  check_cmd_options
}

# read_config_file ARGS...: config_args = the options of --config FILE (or of db.conf in the
# recipe dir when there is no --config), which go before the command line's, so that the
# command line wins. One option a line: `--name value` (the rest of the line is the value,
# spaces and all) or a Hydra override `key=value`; blank lines and lines starting with # are
# skipped. A relative path given to a path option (--data-root, --exp-root, --slurm-conf, the
# corpus directories) counts from the file's directory.
config_args=()
read_config_file() {
  local file="" line name value lineno=0 dir
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --config) [[ $# -ge 2 ]] || usage_error "option --config needs a value"; file=$(absolute_path "$here" "$2"); shift 2 ;;
      --config=*) file=$(absolute_path "$here" "${1#*=}"); shift ;;
      *) shift ;;
    esac
  done
  if [[ -z "$file" ]]; then
    [[ -f db.conf ]] || return 0
    file=$PWD/db.conf
  fi
  [[ -f "$file" && -r "$file" ]] || usage_error "--config $file: no such readable file"
  dir=$(dirname "$file")
  while IFS= read -r line || [[ -n "$line" ]]; do
    lineno=$((lineno + 1))
    line=${line#"${line%%[![:space:]]*}"}; line=${line%"${line##*[![:space:]]}"}  # trim
    [[ -z "$line" || "$line" == \#* ]] && continue
    if [[ "$line" == --* ]]; then
      name=${line%%[[:space:]]*}; value=${line#"$name"}; value=${value#"${value%%[![:space:]]*}"}
      [[ -n "$value" ]] || usage_error "$file:$lineno: $name needs a value on the same line"
      [[ "$name" != --config ]] || usage_error "$file:$lineno: --config cannot be nested"
      is_path_option "${name#--}" && value=$(absolute_path "$dir" "$value")
      config_args+=("$name" "$value")
    elif [[ "$line" == *=* ]]; then
      config_args+=("$line")
    else
      usage_error "$file:$lineno: expected --option value or key=value, got '$line'"
    fi
  done < "$file"
  log "options from $file: ${config_args[*]}"
}

is_path_option() {
  local name=${1//-/_} p
  for p in data_root exp_root slurm_conf "${corpus_paths[@]}"; do [[ "$name" == "$p" ]] && return 0; done
  for p in "${corpus_lists[@]}"; do [[ "$name" == "${p#*:}" ]] && return 0; done
  return 1
}

# link_root ROOT NAME...: with a ROOT (--data-root, --exp-root), each NAME in the recipe dir is a
# symbolic link to ROOT/NAME, made when missing. A NAME that is a directory here, or a link to
# another place, is an error (exit 2): moving outputs is the user's decision, never silent.
link_root() {
  local root=$1 name target; shift
  [[ -n "$root" ]] || return 0
  root=$(realpath -m -- "$(absolute_path "$here" "$root")")
  for name in "$@"; do
    target=$root/$name
    if [[ -L "$name" ]]; then
      [[ "$(readlink "$name")" == "$target" ]] || usage_error "$PWD/$name links to $(readlink "$name"), not $target; remove the link (rm $name) to move it, after moving its contents"
    elif [[ -e "$name" ]]; then
      usage_error "$PWD/$name is a directory here; move it to $target first (mv $name $root/)"
    else
      mkdir -p "$target"
      ln -s "$target" "$name"
    fi
  done
}

# replayable_command: `cd DIR && bash RUN.SH ARGS`, every word quoted for the shell (printf %q).
replayable_command() {
  local dir=${here:-$OLDPWD}
  printf 'cd %q && bash' "$dir"
  printf ' %q' "$0" "${RECIPE_ARGS[@]}"
}

# hydra_quote VALUE: VALUE as one quoted Hydra override value, whatever it holds. Inside Hydra's
# quotes only backslashes before a quote (or the end) and the quote itself need escaping, and
# `${` is escaped so that OmegaConf keeps it literal instead of interpolating.
hydra_quote() {
  local in=$1 out="" run="" c i
  for (( i = 0; i < ${#in}; i++ )); do
    c=${in:i:1}
    case "$c" in
      '\') run+='\' ;;
      "'") out+="$run$run\\'"; run="" ;;
      '$') if [[ "${in:i+1:1}" == '{' ]]; then out+="$run$run\\\$"; else out+="$run\$"; fi; run="" ;;
      *) out+="$run$c"; run="" ;;
    esac
  done
  printf "'%s'" "$out$run$run"
}

# hydra_unquote VALUE: the plain value of a Hydra override value written as 'x' or "x" (the
# common cases; escapes other than \' and \" are left as they are).
hydra_unquote() {
  local v=$1
  if [[ ${#v} -ge 2 && ( ( "$v" == \'*\' ) || ( "$v" == \"*\" ) ) ]]; then
    v=${v:1:${#v}-2}; v=${v//\\\'/\'}; v=${v//\\\"/\"}
  fi
  printf '%s' "$v"
}

# override_value KEY DEFAULT: the value a `KEY=value` override sets, else DEFAULT (last wins).
override_value() {
  local key=$1 value=$2 o
  for o in "${overrides[@]}"; do
    [[ "$o" == "$key="* ]] && value=$(hydra_unquote "${o#*=}")
  done
  printf '%s' "$value"
}

# --- stage records: is a stage done? ------------------------------------------------------
# One rule, the stages' own (asr/utils/record.py): a stage is done when its record names the
# options it ran with and its inputs' identity, those inputs are unchanged and its outputs are
# there. run_stage keeps that record for the whole stage in exp/NAME/.done/<N>.<stage>.record.json
# (asr/utils/recipe_record.py), written after the stage succeeded from the records the stage
# wrote while it ran: their inputs (data/train/text for the tokenizer; the text, features and
# tokenizer model for training) and their outputs. Editing an input or an option therefore runs
# again exactly the stages that read it, and those that read what they remake. A command whose
# records name no input (synth, which reads nothing; the tests' stand-ins) takes the records of
# the stages before it as its inputs: it runs again whenever one of them ran again.

# The config groups each stage reads: an override of any other group does not make a done
# stage run again. Overrides outside these groups (exp_name, seed, device) count for every
# stage, and so do all overrides for a stage not listed; experiment=NAME counts for the stages
# that read a group the experiment sets (asr/utils/experiment_groups.py).
config_groups=" data synth features tokenizer lm lang gmm model train distributed decode score sweep average size "
declare -A stage_groups=(
  [synth]="synth" [prepare]="data" [validate]="data" [perturb]="data" [features]="data features"
  [phone_ali]="data synth features"
  [tokenizer]="data tokenizer" [lm]="data tokenizer lm" [lang]="data lang"
  [gmm_features]="data features"
  [train]="data features tokenizer model train distributed"
  [tune]="data features tokenizer lm lang model train distributed decode"
  [decode]="data features tokenizer lm lang model train distributed decode"
  [decode_greedy]="data features tokenizer lm model train distributed decode"
  [score]="data decode score" [score_greedy]="data decode score"
)
# The GMM systems' stages (gmm_system, gmm_align_dev): NAME, NAME_dev, NAME_decode, NAME_score.
stage_groups[tri4_feats]="data features gmm size"
stage_groups[sat_features]="data features"
for system in mono tri1 tri2 tri3 tri4 tri5; do
  stage_groups[$system]="data features lang gmm size"
  stage_groups[${system}_dev]="data features lang gmm size"
  stage_groups[${system}_decode]="data features lang lm gmm decode size"
  stage_groups[${system}_score]="data decode score"
done
# Stages that only check: running them again does not change what the later stages use, so
# they are nobody's input.
declare -A checks_only=([validate]=1)
# The stages whose outputs (data/, feats/, lang/) every experiment of a recipe shares: their
# record is copied to data/.done/, and a new --exp takes it instead of running them again.
shared_stages=" synth prepare validate perturb features tokenizer lm lang "

# stage_options NAME COMMAND...: the words that decide a stage's result, one per line, quoted.
# A shared stage's leave out exp_name: its outputs are the same for every experiment.
stage_options() {
  local name=$1 word group; shift
  local groups=" ${stage_groups[$name]:-$config_groups} "
  for word in "$@"; do
    [[ "$shared_stages" != *" $name "* || "$word" != exp_name=* ]] || continue
    [[ "$word" != experiment=* ]] || experiment_counts "$groups" || continue
    if [[ "$word" =~ ^[+~]*([A-Za-z_][A-Za-z0-9_]*)([.=]|$) ]]; then
      group=${BASH_REMATCH[1]}
      if [[ "$config_groups" == *" $group "* && "$groups" != *" $group "* ]]; then
        continue
      fi
    fi
    printf '%q\n' "$word"
  done
}

# experiment_counts " GROUPS ": whether the experiment= override sets any of GROUPS, or a key
# outside the config groups (which counts for every stage).
experiment_counts() {
  local g groups_set
  read -ra groups_set <<< "$experiment_groups"  # not `for g in $experiment_groups`: `*` would glob
  for g in "${groups_set[@]}"; do
    [[ "$config_groups" == *" $g "* && "$1" != *" $g "* ]] || return 0
  done
  return 1
}

# stage_changes RECORD OPTIONS: succeeds when RECORD says the stage is done with OPTIONS; else
# prints what changed, one line each (an option word - or +, an input, an output).
stage_changes() { python -m asr.utils.recipe_record check "$1" <<< "$2"; }

# earlier_records N NAME: the records of the stages before stage N NAME, the inputs of a
# command whose own records name none (synth; a stand-in): those this run.sh went through before it (numbered N or lower;
# a side stage such as decode_greedy shares decode's number and comes after score, which does not
# read it), and those numbered below --stage; a shared stage's by its copy in data/.done/, which
# every experiment's stages read. validate only checks, so it is nobody's input.
declare -A seen_now=()
declare -A ran_now=()  # the stages this run ran (not skipped)
earlier_records() {
  local n=$1 name=$2 record base number
  for record in "$exp_dir"/.done/*.record.json; do
    [[ -f "$record" ]] || continue
    base=${record##*/}; base=${base%.record.json}; number=${base%%.*}
    [[ "$number" =~ ^-?[0-9]+$ && "$base" != "$n.$name" && -z "${checks_only[${base#*.}]:-}" ]] || continue
    if (( number < stage )) || [[ -n "${seen_now[$base]:-}" ]] && (( number <= n )); then
      # a shared stage's shared copy: what every experiment's stages read
      [[ "$shared_stages" != *" ${base#*.} "* || ! -f "$(shared_record "$base")" ]] || record=$(shared_record "$base")
      printf -- '--after\n%s\n' "$record"
    fi
  done
}

# stage_record ACTION N NAME [OPTIONS]: `snapshot` the stage records there are before stage N
# NAME runs; `write` its record after it succeeded, from the records that are new or changed
# since (a comparison of mtimes with mtimes: a SLURM node's clock does not matter).
stage_record() {
  local action=$1 n=$2 name=$3 options=${4:-} record="$exp_dir/.done/$2.$3.record.json" after=()
  local where=(--root . --root "$(override_value data.data_dir data)" --exp "$exp_dir")
  if [[ $action == snapshot ]]; then
    python -m asr.utils.recipe_record snapshot "$record" "${where[@]}"
    return
  fi
  mapfile -t after < <(earlier_records "$n" "$name")
  python -m asr.utils.recipe_record write "$record" "${where[@]}" --previous "$record.before" \
    --used "$(used_records "$n" "$name")" "${after[@]}" <<< "$options"
  rm -f "$record.before"
  share_record "$name" "$record"
}

# used_records N NAME: the file where the stage's why_rerun notes the records it finds up to date
# (asr/utils/record.py), so that a stage that skips its work by its own record still names them.
used_records() { printf '%s/%s/.done/%s.%s.used' "$PWD" "$exp_dir" "$1" "$2"; }

# run_stage N NAME command...: run when N is inside [stage, stop_stage] and the stage is not
# done (its record, or a shared stage's record from another experiment). The record is moved
# aside while the stage runs, so an interrupted stage runs again; a failed stage ends the recipe
# with the stage's own exit status. Each stage that ran adds a line with its wall seconds to
# <exp_dir>/stage_times.jsonl (a re-run adds more lines; the last of a stage is its latest).
run_stage() {
  local n=$1 name=$2; shift 2
  (( n >= stage && n <= stop_stage )) || return 0
  local record="$exp_dir/.done/$n.$name.record.json" options changes="" status
  options=$(stage_options "$name" "$@")
  if [[ "$force" != true ]]; then
    if [[ -f "$record" ]] && changes=$(stage_changes "$record" "$options"); then
      log "stage $n ($name): done already ($record), skipping"
      seen_now[$n.$name]=1
      return 0
    elif reuse_shared_record "$name" "$record" "$options"; then
      log "stage $n ($name): done already by another experiment ($(shared_record "$n.$name")), skipping"
      seen_now[$n.$name]=1
      return 0
    elif adopt_marker "$n" "$name" "$options"; then
      return 0
    fi
    [[ -z "$changes" ]] || log "stage $n ($name): done before, but an option or an input changed; running it again. Changed:"$'\n'"$changes"
  fi
  [[ ! -f "$record" ]] || mv -f "$record" "$record.before"
  log "stage $n ($name): $*"
  { printf '%q ' "$@"; echo; } > "$exp_dir/.done/$n.$name.cmd"
  stage_record snapshot "$n" "$name"
  local start=$SECONDS
  rm -f "$(used_records "$n" "$name")"
  export ASR_RECORDS_USED
  ASR_RECORDS_USED=$(used_records "$n" "$name")
  dispatch "$n" "$name" "$@" && status=0 || status=$?
  unset ASR_RECORDS_USED
  if (( status != 0 )); then
    log "ERROR: stage $n ($name) failed (exit $status); fix the problem above and re-run with --stage $n"
    exit "$status"
  fi
  stage_record write "$n" "$name" "$options"
  seen_now[$n.$name]=1
  ran_now[$n.$name]=1
  log "stage $n ($name): finished in $((SECONDS - start)) s"
  printf '{"stage": %s, "name": "%s", "seconds": %d, "finished": "%s"}\n' "$n" "$name" "$((SECONDS - start))" \
    "$(date '+%Y-%m-%d %H:%M:%S')" >> "$exp_dir/stage_times.jsonl"
}

# --- shared stages: a new --exp reuses them -------------------------------------------------
shared_record() { printf '%s/.done/%s.record.json' "$(override_value data.data_dir data)" "$1"; }

# reuse_shared_record NAME RECORD OPTIONS: copy the shared record of a shared stage to RECORD
# when it says the stage is done with OPTIONS (another experiment ran it, or ran it again).
reuse_shared_record() {
  local name=$1 record=$2 options=$3 shared base=${2##*/}
  [[ "$shared_stages" == *" $name "* ]] || return 1
  shared=$(shared_record "${base%.record.json}")
  [[ -f "$shared" ]] && stage_changes "$shared" "$options" >/dev/null || return 1
  cp "$shared" "$record.tmp"
  mv "$record.tmp" "$record"
}

share_record() {
  local name=$1 record=$2 shared base=${2##*/}
  [[ "$shared_stages" == *" $name "* ]] || return 0
  shared=$(shared_record "${base%.record.json}")
  mkdir -p "$(dirname "$shared")"
  cp "$record" "$shared.tmp"
  mv "$shared.tmp" "$shared"
}

# adopt_marker N NAME OPTIONS: an experiment run before stage records left exp/NAME/.done/<N>.<stage>
# (a marker holding the options, or only a date); with the same options (or none recorded) the
# stage counts as done and its record is written now, from the records already there.
adopt_marker() {
  local n=$1 name=$2 options=$3 marker="$exp_dir/.done/$1.$2"
  [[ -f "$marker" ]] || return 1
  if [[ $(head -c 10 "$marker") == "# finished" ]]; then
    [[ "$(tail -n +2 "$marker" | grep -v '^exp_name=' | sort)" == "$(grep -v '^exp_name=' <<< "$options" | sort)" ]] || return 1
  fi
  stage_record snapshot "$n" "$name"  # the records already there are not its own
  stage_record write "$n" "$name" "$options"
  rm -f "$marker"
  log "stage $n ($name): done already (marker of an older run.sh, now $exp_dir/.done/$n.$name.record.json), skipping"
  seen_now[$n.$name]=1
}

# train_launcher: sets the array `launcher` to plain python for one process, torchrun otherwise.
train_launcher() {
  if (( nproc == 1 && nnodes == 1 )); then
    launcher=(python -m)
  elif (( nnodes == 1 )); then
    launcher=(torchrun --standalone --nproc-per-node "$nproc" --max-restarts "$max_restarts" -m)
  else  # the rendezvous id: the experiment's name, the same on every machine
    launcher=(torchrun --nnodes "$nnodes" --node-rank "$node_rank" --nproc-per-node "$nproc"
              --max-restarts "$max_restarts" --rdzv-backend c10d --rdzv-endpoint "$rdzv_endpoint"
              --rdzv-id "$exp")
    [[ -z "$local_addr" ]] || launcher+=(--local-addr "$local_addr")
    launcher+=(-m)
  fi
}

# absolute_path START PATH: PATH, relative ones taken from START (where run.sh was started).
absolute_path() {
  if [[ "$2" == /* ]]; then printf '%s' "$2"; else printf '%s' "$1/$2"; fi
}

# corpus_overrides START_DIR data=GROUP: select the data group and set data.<name> for each
# corpus option given (see corpus_option, corpus_list_option), each path quoted for Hydra. The
# data group goes before the user's overrides, the paths after them.
corpus_overrides() {
  local start=$1 group=$2 name pair path items quoted
  overrides=("${overrides[0]}" "$group" "${overrides[@]:1}")
  for name in "${corpus_paths[@]}"; do
    [[ -n "${!name}" ]] || continue
    overrides+=("data.$name=$(hydra_quote "$(absolute_path "$start" "${!name}")")")
  done
  for pair in "${corpus_lists[@]}"; do
    name=${pair%%:*}
    local -n more=${pair#*:}
    read -r -a items <<< "${!name}"  # split at white space; read never globs
    items+=("${more[@]}")
    unset -n more
    (( ${#items[@]} )) || continue
    quoted=()
    for path in "${items[@]}"; do
      quoted+=("$(hydra_quote "$(absolute_path "$start" "$path")")")
    done
    overrides+=("data.$name=[$(IFS=,; echo "${quoted[*]}")]")
  done
}

# decode_options: --decode beam_lm|greedy and --score hub5|jiwer, for recipes that end in a WER.
decode_options() {
  recipe_option decode beam_lm   # beam_lm: CTC beam search with the word LM; greedy: best path
  recipe_option score hub5       # hub5: stm/CTM/GLM with NIST SCTK (native Python without it); jiwer: Kaldi text
}

check_decode_options() {
  [[ "$decode" == beam_lm || "$decode" == greedy ]] || usage_error "--decode '$decode': choose beam_lm or greedy"
  [[ "$score" == hub5 || "$score" == jiwer ]] || usage_error "--score '$score': choose hub5 or jiwer"
}

# decode_stages FIRST: tune (beam_lm only), decode and score as stages FIRST..FIRST+2. Each
# decoding has its own dir: beam+LM decode_<set><suffix>/, greedy decode_<set><suffix>_greedy/
# (scored beside the LM's too, seconds, to show what the LM brings), so --decode greedy never
# touches the LM result. The greedy suffix comes last among the overrides: the last one wins.
decode_stages() {
  local n=$1 greedy_dir
  greedy_dir="decode.dir_suffix=$(hydra_quote "$(override_value decode.dir_suffix "")_greedy")"
  if [[ $decode == beam_lm ]]; then
    run_stage "$n" tune python -m asr.tune decode=beam_lm "${overrides[@]}"
    run_stage $((n + 1)) decode python -m asr.decode decode=beam_lm "${overrides[@]}"
    run_stage $((n + 2)) score  python -m asr.score "score=$score" "${overrides[@]}"
  fi
  run_stage $((n + 1)) decode_greedy python -m asr.decode decode=greedy "${overrides[@]}" "$greedy_dir"
  run_stage $((n + 2)) score_greedy  python -m asr.score "score=$score" "${overrides[@]}" "$greedy_dir"
  last_stage=$((n + 2))
}

# --- the GMM-HMM systems (stage 4; asr/gmm), as Kaldi's swbd s5c trains them --------------------
# gmm_overrides: the overrides every GMM stage gets (the caller sets them).
# gmm_system NAME KIND [overrides...]: exp/NAME trained (python -m asr.gmm gmm=KIND), decoded with
# its HCLG and scored, as stages 4 NAME, NAME_decode and NAME_score.
gmm_system() {
  local name=$1 kind=$2; shift 2
  run_stage 4 "$name"          python -m asr.gmm "gmm=$kind" "gmm.dir=exp/$name" "$@" "${gmm_overrides[@]}"
  run_stage 4 "${name}_decode" python -m asr.gmm.decode "gmm=$kind" "gmm.dir=exp/$name" "$@" "${gmm_overrides[@]}"
  run_stage 4 "${name}_score"  python -m asr.score "score=$score" "exp_dir=exp/$name" "${gmm_overrides[@]}"
}
# gmm_align_dev NAME KIND [overrides...]: exp/NAME aligns the dev set into exp/NAME_ali_dev (stage
# 4 NAME_dev; a SAT system as align_fmllr.sh does), the hybrid model's dev targets.
gmm_align_dev() {
  local name=$1 kind=$2; shift 2
  run_stage 4 "${name}_dev" python -m asr.gmm "gmm=$kind" gmm.kind=align "gmm.alignments=exp/$name" \
    "gmm.dir=exp/${name}_ali_dev" "gmm.align_set=$(override_value data.dev_set train_dev)" "$@" "${gmm_overrides[@]}"
}
# gmm_feature_overrides: gmm_overrides = the overrides with features=logmel40, what the GMM systems
# read whatever the acoustic model's features; features_from_sat: the model's features (given on
# the command line, or the experiment's) read the SAT system's (features=sat40,
# sat40_ivector100_logmel40_deltas), so sat_features_stages makes them after the GMM stages.
gmm_feature_overrides() {
  local o
  gmm_overrides=()
  for o in "${overrides[@]}"; do [[ $o == features=* ]] || gmm_overrides+=("$o"); done
  gmm_overrides+=(features=logmel40)
}
features_from_sat() {
  local features experiment
  features=$(override_value features "") experiment=$(override_value experiment "")
  [[ -n $features || -z $experiment ]] || features=$(python -m asr.utils.experiment_groups "$experiment" --choice features)
  [[ $features == sat40* ]]
}
# sat_features_stages: exp/tri4's speaker-adapted features as Kaldi data dirs (make_fmllr_feats.sh;
# stage 4 tri4_feats), then the model's feature set, which reads them (stage 4 sat_features):
# sat40 imports them, sat40_ivector100_logmel40_deltas pastes them into the paper's 260 dims.
sat_features_stages() {
  run_stage 4 tri4_feats   python -m asr.gmm.fmllr_feats gmm=sat gmm.dir=exp/tri4 "${gmm_overrides[@]}"
  run_stage 4 sat_features python -m asr.features "${overrides[@]}"
}
# s5c_size LEAVES GAUSSIANS: a Switchboard system's tree and Gaussians as s5c sizes them, unless size=tiny
# (conf/size/tiny.yaml) shrinks them.
s5c_size() {
  [[ $(override_value size full) == tiny ]] || printf '%s\n' "gmm.num_leaves=$1" "gmm.total_gauss=$2"
}

# switchboard_hybrid_stages: the paper's hybrid BLSTM-HMM without Kaldi (experiment=swb*_hybrid_*):
# s5c's GMM ladder on 13 MFCCs (from a logmel40 feature set), mono on the 30k shortest utterances,
# tri1 and tri2 (deltas) on the first 100k, tri3 (LDA+MLLT) and tri4 (SAT) on all; the model's
# features after them (the presets': tri4's 40 adapted dims in the paper's 260); then tri5, SAT
# with the paper's 32k leaves, whose alignments the BLSTM learns and whose graph decodes it.
switchboard_hybrid_stages() {
  local size=()
  gmm_feature_overrides
  run_stage 2 gmm_features python -m asr.features "${gmm_overrides[@]}"
  run_stage 4 lang         python -m asr.lang "${gmm_overrides[@]}"
  gmm_system mono mono gmm.subset=30000
  mapfile -t size < <(s5c_size 3200 30000)
  gmm_system tri1 tri gmm.alignments=exp/mono gmm.first=100000 "${size[@]}"
  mapfile -t size < <(s5c_size 4000 70000)
  gmm_system tri2 tri gmm.alignments=exp/tri1 gmm.first=100000 "${size[@]}"
  mapfile -t size < <(s5c_size 6000 140000)
  gmm_system tri3 lda_mllt gmm.alignments=exp/tri2 "${size[@]}"
  mapfile -t size < <(s5c_size 11500 200000)
  gmm_system tri4 sat gmm.alignments=exp/tri3 "${size[@]}"
  gmm_align_dev tri4 sat
  sat_features_stages
  # the hybrid model's tree at the paper's size (--hybrid-leaves, 32,000 by default): a SAT system
  # on tri4's alignments and transforms, aligning the training and dev sets for the BLSTM
  mapfile -t size < <(s5c_size "$hybrid_leaves" $((hybrid_leaves * 12)))
  [[ -z ${hybrid_leaves_given:-} ]] || size=("gmm.num_leaves=$hybrid_leaves")  # given: even with size=tiny
  gmm_system tri5 sat gmm.alignments=exp/tri4 "${size[@]}"
  gmm_align_dev tri5 sat
}
hybrid_experiment() { [[ $(override_value experiment "") == *_hybrid_* ]]; }
# hybrid_options: --hybrid-leaves N, the leaves of the hybrid model's tree (switchboard_hybrid_stages).
hybrid_options() { recipe_option hybrid_leaves 32000; }

# switchboard_stages: the stages of the real-corpus recipes (swb300, swb2000), after
# corpus_overrides has pointed the data group at the corpus.
switchboard_stages() {
  local data
  data=$(override_value data.data_dir data)
  run_stage 0 prepare   python -m asr.data.prepare "${overrides[@]}"
  run_stage 1 validate  python -m asr.data.validate "$data/$(override_value data.train_set train_nodup)" \
                          "$data/$(override_value data.dev_set train_dev)" "$data/$(override_value data.eval_set eval2000)"
  speed_perturb_stage 2 "$data" train_nodup
  hybrid_experiment || run_stage 2 features python -m asr.features "${overrides[@]}"  # hybrid: after its GMMs
  run_stage 3 tokenizer python -m asr.text "${overrides[@]}"
  run_stage 4 lm        python -m asr.lm "${overrides[@]}"
  if hybrid_experiment; then
    switchboard_hybrid_stages
    train_launcher
    run_stage 5 train  "${launcher[@]}" asr.train "${overrides[@]}"
    run_stage 6 tune   python -m asr.tune "${overrides[@]}"  # the acoustic scale on the dev set
    run_stage 7 decode python -m asr.decode "${overrides[@]}"
    run_stage 8 score  python -m asr.score "score=$score" "${overrides[@]}"
    (( stop_stage < 8 )) || python -m asr.report exp/mono exp/tri1 exp/tri2 exp/tri3 exp/tri4 exp/tri5 "$exp_dir" \
      --out "$exp_dir/report"
    last_stage=8
    return 0
  fi
  train_launcher
  run_stage 5 train     "${launcher[@]}" asr.train "${overrides[@]}"
  decode_stages 6
  show_wer
}

# speed_perturb_option: --speed-perturb true|false, Kaldi's 3-way speed perturbation (0.9 1.0 1.1)
# of the training set; speed_perturb_stage N DATA DEFAULT_TRAIN_SET runs it as stage N and points
# every later stage at <train>_sp.
speed_perturb_option() { recipe_option speed_perturb false; }
speed_perturb_stage() {
  [[ $speed_perturb == true ]] || return 0
  local train_set
  train_set=$(override_value data.train_set "$3")
  run_stage "$1" perturb python -m asr.data.perturb "$2/$train_set"
  overrides+=("data.train_set=$(hydra_quote "${train_set}_sp")")
}

# show_wer: after the score stages (decode_stages ran), one line per decoding of the eval set:
# its total WER as Kaldi prints it, and its table when no score stage of this run printed it.
show_wer() {
  local eval_set dir
  eval_set=$(override_value data.eval_set eval2000)
  (( stop_stage >= last_stage )) || return 0
  dir="$exp_dir/decode_$eval_set$(override_value decode.dir_suffix "")"
  wer_line "WER on $eval_set, greedy decoding (no LM), $score scoring" "${dir}_greedy" score_greedy
  [[ $decode != beam_lm ]] || wer_line "WER on $eval_set, beam_lm decoding, $score scoring" "$dir" score
}
wer_line() {
  local total
  [[ -f "$2/wer.md" ]] || return 0
  total=$(grep ' total$' "$2/wer.txt" 2>/dev/null | cut -d' ' -f1-13)
  log "$1: ${total:-see} ($2/wer.md)"
  [[ -n "${ran_now[$last_stage.$3]:-}" ]] || cat "$2/wer.md"
}
