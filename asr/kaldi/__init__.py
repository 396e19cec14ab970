"""Kaldi's file formats, one home for each: text tables (`table`), segments and durations
(`segments`), the command policy of scp entries (`commands`), binary objects (`binary`),
matrices and transforms (`matrix`), GMMs (`gmm`), i-vector extractors (`ivector`), transition
models and HMM topologies (`transition_model`), alignment archives (`alignments`), pdf counts
(`pdf_counts`) and context-dependency trees (`tree`). Imports nothing of asr but `asr.utils`."""
