"""The synthetic LDC-format corpus: Switchboard-1 + MS98 transcripts and Hub5-2000 (eval2000)
look-alikes spoken by eSpeak NG voices, in the real release layouts (python -m asr.data.synth)."""
