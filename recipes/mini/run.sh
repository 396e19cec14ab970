#!/usr/bin/env bash
# Mini recipe: the synthetic LDC-format Switchboard-1 + Hub5-2000 corpus, end to end.
#   ./run.sh [--stage N] [--stop-stage M] [--exp NAME] [--decode beam_lm|greedy] [--score hub5|jiwer] [hydra overrides...]
# Stages: 0 synth, 1 prepare, 2 validate, 3 features, 4 tokenizer, 5 lm, 6 train, 7 tune (LM weight on dev), 8 decode, 9 score.
here=$PWD
cd "$(dirname "$0")"
RECIPE_ARGS=("$@")
. ../../scripts/recipe.sh
decode_options
recipe_option speed_perturb false  # true: train on <train>_sp, Kaldi's 3-way speed perturbation (0.9 1.0 1.1)
usage() { sed -n '2,4p' "$0"; }
parse_options "$@"
[[ $speed_perturb == true || $speed_perturb == false ]] || usage_error "--speed-perturb '$speed_perturb': true or false"
data=$(override_value data.data_dir data)

run_stage 0 synth     python -m asr.data.synth "${overrides[@]}"
run_stage 1 prepare   python -m asr.data.prepare "${overrides[@]}"
run_stage 2 validate  python -m asr.data.validate "$data/train" "$data/train_dev" "$data/eval2000"
if [[ $speed_perturb == true ]]; then  # from here on every stage trains on the perturbed set
  train_set=$(override_value data.train_set train)
  run_stage 3 perturb python -m asr.data.perturb "$data/$train_set"
  overrides+=("data.train_set=$(hydra_quote "${train_set}_sp")")
fi
run_stage 3 features  python -m asr.features "${overrides[@]}"
run_stage 4 tokenizer python -m asr.text "${overrides[@]}"
run_stage 5 lm        python -m asr.lm "${overrides[@]}"
train_launcher
run_stage 6 train     "${launcher[@]}" asr.train "${overrides[@]}"
decode_stages 7
show_wer
