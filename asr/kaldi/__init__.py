"""Kaldi's file formats, one home for each, below every stage that reads or writes them: text
tables (`table`), segments and durations (`segments`), the policy for scp entries that are
commands (`commands`), binary objects (`binary`), matrices and transforms (`matrix`), GMMs
(`gmm`), i-vector extractors (`ivector`), the transition model and HMM topology
(`transition_model`), `final.mdl` (`model`), alignment archives (`alignments`), pdf counts
(`pdf_counts`) and context-dependency trees (`tree`). Imports nothing of asr but `asr.utils`."""
