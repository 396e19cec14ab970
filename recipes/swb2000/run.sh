#!/usr/bin/env bash
# SWB-2000: SWB-300 plus Fisher English parts 1 and 2, scored on Hub5-2000.
#   ./run.sh --swbd-dir DIR --ms98-dir DIR --fisher-dirs "LDC2004T19 LDC2005T19 LDC2004S13 LDC2005S13" \
#            (or --fisher-dir DIR once per directory, for paths with spaces) \
#            --eval2000-dir DIR --eval2000-text-dir DIR [--stage N] [--stop-stage M] [--exp NAME] \
#            [--nproc N --nnodes N ...] [overrides...]
# Stages (numbered as in every recipe): 0 prepare, 1 validate, 2 features, 3 tokenizer, 4 lm, 5 train, 6 tune,
#         7 decode (--decode beam_lm|greedy), 8 score (--score hub5|jiwer); --speed-perturb true adds
#         stage 2 perturb (train on train_nodup_sp). --cmd local|slurm --nj N: where stages run (scripts/cmd.sh);
#         --data-root/--exp-root DIR: outputs on another disk; corpus paths and presets once in db.conf.
# The default experiment is the paper's hybrid BLSTM-HMM, swb2000_hybrid_ssgd (or _adpsgd, _hadpsgd);
#         CTC presets: experiment=swb2000_ssgd | swb2000_adpsgd | swb2000_hadpsgd; see RESULTS.md.
# The hybrid BLSTM-HMM (experiment=swb2000_hybrid_<ssgd|adpsgd|hadpsgd>) adds to stage 2 a
#         logmel40 set for the GMMs and to stage 4 lang and s5c's GMM ladder without Kaldi (mono, tri1,
#         tri2, tri3 LDA+MLLT, tri4 SAT, each decoded and scored), then tri5: SAT with the paper's tree
#         (--hybrid-leaves N, default 32000); the BLSTM trains on tri5's alignments, its acoustic scale
#         is tuned (6), it decodes with tri5's HCLG (7) and is scored (8); exp/NAME/report.md lists every
#         system. Its input, the paper's 260 dims, holds tri4's 40 speaker-adapted dims (made in stage 4;
#         features=sat40: those alone; features=fmllr40_ivector100_logmel40_deltas: a UBM's fMLLR instead).
# size=tiny: every system, the BLSTM, its epochs, the LM and the searches shrunk (conf/size/tiny.yaml),
#         to try a recipe on a corner of a corpus before a week-long run.
here=$PWD
cd "$(dirname "$0")"
RECIPE_ARGS=("$@")
. ../../scripts/recipe.sh
default_experiment=swb2000_hybrid_ssgd  # the paper's system; the CTC presets by name
decode_options
speed_perturb_option
hybrid_options  # --hybrid-leaves N: the hybrid model's tree (experiment=*_hybrid_*)
corpus_option swbd_dir
corpus_option ms98_dir
corpus_list_option fisher_dirs fisher_dir  # --fisher-dirs "A B C D", or --fisher-dir A --fisher-dir B ... (paths with spaces)
corpus_option eval2000_dir
corpus_option eval2000_text_dir
parse_options "$@"
corpus_overrides "$here" data=swb2000
switchboard_stages
