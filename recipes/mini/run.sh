#!/usr/bin/env bash
# Mini recipe: the synthetic LDC-format Switchboard-1 + Hub5-2000 corpus, end to end.
#   ./run.sh [--stage N] [--stop-stage M] [--exp NAME] [hydra overrides...]
# Stages: 0 synth, 1 prepare, 2 validate, 3 features, 4 tokenizer, 5 train, 6 decode, 7 score.
cd "$(dirname "$0")"
RECIPE_ARGS=("$@")
. ../../scripts/recipe.sh
usage() { sed -n '2,4p' "$0"; }
parse_options "$@"
data=$(override_value data.data_dir data)

run_stage 0 synth     python -m asr.data.synth "${overrides[@]}"
run_stage 1 prepare   python -m asr.data.prepare "${overrides[@]}"
run_stage 2 validate  python -m asr.data.validate $data/train $data/train_dev $data/eval2000
run_stage 3 features  python -m asr.features "${overrides[@]}"
run_stage 4 tokenizer python -m asr.text "${overrides[@]}"
run_stage 5 train     $(train_launcher) asr.train "${overrides[@]}"
run_stage 6 decode    python -m asr.decode "${overrides[@]}"
run_stage 7 score     python -m asr.score "${overrides[@]}"

if (( stop_stage >= 7 )) && [[ -f "$exp_dir/decode_eval2000/wer.md" ]]; then
  log "WER on eval2000 ($exp_dir/decode_eval2000/wer.md):"
  cat "$exp_dir/decode_eval2000/wer.md"
fi
