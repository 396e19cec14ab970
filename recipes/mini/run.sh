#!/usr/bin/env bash
# Mini recipe: the synthetic LDC-format Switchboard-1 + Hub5-2000 corpus, end to end.
#   ./run.sh [--stage N] [--stop-stage M] [--exp NAME] [--decode beam_lm|greedy] [--score hub5|jiwer]
#            [--speed-perturb true] [--cmd local|slurm] [--nj N] [--data-root DIR] [--exp-root DIR]
#            [--config FILE] [hydra overrides...]   (all options: scripts/recipe.sh, scripts/cmd.sh)
# Stages (the numbers of every recipe, docs/recipes.md): -1 synth (the synthetic corpus), 0 prepare,
# 1 validate, 2 features, 3 tokenizer, 4 lm and lang, 5 train, 6 tune (LM weight, or the hybrid
# model's acoustic scale, on dev), 7 decode, 8 score; --stage 0 starts from the corpus already made.
# With experiment=hybrid the toolkit's own GMM-HMM systems come first (stage 4: lang, monophones,
# triphones, LDA+MLLT, SAT, each decoded with its HCLG and scored), the BLSTM trains on the
# triphone alignments (frame cross-entropy) and decodes with the triphone HCLG;
# exp/NAME/report.md compares them all. size=tiny shrinks every system, the model, its
# epochs, the LM and the searches (conf/size/tiny.yaml) for a smoke-size run.
# With experiment=hybrid_ce the BLSTM trains on frame targets from the synthesiser's phone timings
# (stage 2 phone_ali, exp/NAME/phone_ali/) and the recipe ends after training: hybrid decoding
# needs a Kaldi graph (python -m asr.decode experiment=hybrid_ce writes log-likelihoods for it).
here=$PWD
cd "$(dirname "$0")"
RECIPE_ARGS=("$@")
. ../../scripts/recipe.sh
decode_options
speed_perturb_option  # true: train on <train>_sp, Kaldi's 3-way speed perturbation (0.9 1.0 1.1)
data_root_dirs+=(corpus)  # --data-root DIR: the synthetic corpus (synth.out_dir) goes to DIR/corpus too
parse_options "$@"
data=$(override_value data.data_dir data)
hybrid=false  # hybrid_ce: frame targets from the synthesiser's phone timings, no decoding
[[ $(override_value experiment "") == hybrid_ce ]] && hybrid=true
gmm_hybrid=false  # hybrid: GMM-HMM systems, the BLSTM on their alignments, WFST decoding
case $(override_value experiment "") in hybrid|hybrid_sat) gmm_hybrid=true ;; esac  # hybrid_sat: on tri4, sat40

run_stage -1 synth     python -m asr.data.synth "${overrides[@]}"
run_stage 0 prepare   python -m asr.data.prepare "${overrides[@]}"
run_stage 1 validate  python -m asr.data.validate "$data/train" "$data/train_dev" "$data/eval2000"
speed_perturb_stage 2 "$data" train  # with --speed-perturb true every later stage trains on train_sp
gmm_overrides=("${overrides[@]}")  # the GMM systems' (stage 4); with features=sat40* (made after them) logmel40
features_from_sat && gmm_feature_overrides
run_stage 2 features  python -m asr.features "${gmm_overrides[@]}"
if [[ $hybrid == true ]]; then  # phone targets per frame from the corpus' phone timings (a few seconds)
  ali=$exp_dir/phone_ali
  ms98=$(override_value data.ms98_dir "$(override_value synth.out_dir corpus)/swb_ms98_transcriptions")
  run_stage 2 phone_ali python -m asr.train.phone_ali --ms98-dir "$ms98" --out "$ali" \
    "$data/$(override_value data.train_set train)" "$data/$(override_value data.dev_set train_dev)"
  overrides+=("train.alignments=$(hydra_quote "$ali/$(override_value data.train_set train)/pdf.1.gz")"
              "train.dev_alignments=$(hydra_quote "$ali/$(override_value data.dev_set train_dev)/pdf.1.gz")"
              train.transition_model=none)
  [[ ! -f $ali/phones.txt ]] || overrides+=("model.num_pdfs=$(wc -l < "$ali/phones.txt")")
fi
run_stage 3 tokenizer python -m asr.text "${overrides[@]}"
run_stage 4 lm        python -m asr.lm "${overrides[@]}"
run_stage 4 lang      python -m asr.lang "${overrides[@]}"
if [[ $gmm_hybrid == true ]]; then  # Kaldi s5c's GMM systems, each decoded with its HCLG and scored
  timings=(gmm.phone_timings="$(hydra_quote "$(override_value synth.out_dir corpus)/swb_ms98_transcriptions")")
  # MFCCs without deltas: on eSpeak's speech they place phone boundaries better (RESULTS.md)
  gmm_front=()
  [[ -n $(override_value gmm.delta_order "") ]] || gmm_front+=(gmm.delta_order=0)
  # the triphone systems realign at 9 passes after their first, not train_deltas.sh's 3 (10 20
  # 30): tri1's boundaries 82.5% within 20 ms against 80.8% (RESULTS.md), for about 130 s more CPU
  tri_realign=()
  [[ -n $(override_value gmm.realign_iters "") ]] || tri_realign+=("gmm.realign_iters=[3,6,9,12,15,18,21,25,30]")
  gmm_system mono mono "${timings[@]}" "${gmm_front[@]}"
  gmm_system tri1 tri "${timings[@]}" "${gmm_front[@]}" "${tri_realign[@]}"
  gmm_align_dev tri1 tri "${gmm_front[@]}"
  # s5c's tri3 and tri4: LDA+MLLT on tri1's tied states, then SAT on its matrix and alignments,
  # decoded in two passes (speaker-independent, then each speaker's fMLLR)
  gmm_system tri3 lda_mllt gmm.alignments=exp/tri1 "${timings[@]}" "${tri_realign[@]}"
  gmm_system tri4 sat gmm.alignments=exp/tri3 "${timings[@]}" "${tri_realign[@]}"
  gmm_align_dev tri4 sat
  if features_from_sat; then sat_features_stages; fi  # features=sat40*: the BLSTM on tri4's adapted features
fi
train_launcher
run_stage 5 train     "${launcher[@]}" asr.train "${overrides[@]}"
if [[ $hybrid == true ]]; then
  log "hybrid_ce: dev frame accuracy per epoch in $exp_dir/log/; decoding needs a Kaldi graph, so the recipe ends here"
  exit 0
fi
if [[ $gmm_hybrid == true ]]; then  # the BLSTM's log-likelihoods in tri1's graph; one table of all three
  run_stage 6 tune   python -m asr.tune "${overrides[@]}"  # the acoustic scale on the dev set
  run_stage 7 decode python -m asr.decode decode=wfst "${overrides[@]}"
  run_stage 8 score  python -m asr.score "score=$score" "${overrides[@]}"
  (( stop_stage < 8 )) || python -m asr.report exp/mono exp/tri1 exp/tri3 exp/tri4 "$exp_dir" --out "$exp_dir/report"
  exit 0
fi
decode_stages 6
show_wer
