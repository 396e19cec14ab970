#!/usr/bin/env bash
# SWB-2000: SWB-300 plus Fisher English parts 1 and 2, scored on Hub5-2000.
#   ./run.sh --swbd-dir DIR --ms98-dir DIR --fisher-dirs "LDC2004T19 LDC2005T19 LDC2004S13 LDC2005S13" \
#            --eval2000-dir DIR --eval2000-text-dir DIR [--stage N] [--stop-stage M] [--exp NAME] \
#            [--nproc N --nnodes N ...] [overrides...]
# Stages: 0 prepare, 1 validate, 2 features, 3 tokenizer, 4 lm, 5 train, 6 tune (LM weight on dev),
#         7 decode (--decode beam_lm|greedy), 8 score (--score hub5|jiwer).
# Presets: experiment=swb2000_ssgd | swb2000_adpsgd | swb2000_hadpsgd; see RESULTS.md.
here=$PWD
cd "$(dirname "$0")"
RECIPE_ARGS=("$@")
. ../../scripts/recipe.sh
usage() { sed -n '2,9p' "$0"; }
decode_options
recipe_option swbd_dir ""
recipe_option ms98_dir ""
recipe_option fisher_dirs ""
recipe_option eval2000_dir ""
recipe_option eval2000_text_dir ""
parse_options "$@"
corpus_overrides "$here" data=swb2000 swbd_dir="$swbd_dir" ms98_dir="$ms98_dir" fisher_dirs="$fisher_dirs" \
  eval2000_dir="$eval2000_dir" eval2000_text_dir="$eval2000_text_dir"
switchboard_stages
