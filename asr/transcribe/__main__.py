"""`python -m asr.transcribe EXP_DIR a.wav [b.wav ...]`: words of audio files, with an
experiment trained on log-mel features. Prints one line per file: the file, then its words."""

import argparse
import logging
import sys
from pathlib import Path

HELP = """
reads:  EXP_DIR/checkpoints/<--checkpoint>.pt (and the config it holds), the training set's
        features directory (deltas, compression, CMVN statistics), the tokenizer; with
        EXP_DIR/lm_tuning.json (python -m asr.tune) the LM of the experiment
writes: nothing; `FILE word word ...` on stdout, one line per file

Search: beam search with the LM and its tuned weight when EXP_DIR/lm_tuning.json exists,
else greedy CTC (as decode=greedy). CMVN of a single file, by the training's features.cmvn:
utterance or speaker -> the file's own statistics (a file is one speaker); global -> the
training set's statistics; none -> none. A file is decoded whole, from its first channel;
audio at another sample rate is resampled to the model's.
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m asr.transcribe",
        description=__doc__.split("\n\n")[0],
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("exp_dir", help="the experiment (exp/<name>) trained with features.kind=fbank")
    parser.add_argument("audio", nargs="+", help="audio files (WAV, FLAC, SPHERE: what soundfile and the toolkit read)")
    parser.add_argument(
        "--checkpoint", default="last", help="last | best | avg-last5 | a path, as decode.checkpoint (default: last)"
    )
    parser.add_argument("--greedy", action="store_true", help="greedy CTC even when the experiment has a tuned LM")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N | auto (default: cpu)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s [%(name)s] %(message)s", stream=sys.stderr)
    missing = [a for a in args.audio if not Path(a).is_file()]
    if missing:
        print(
            f"python -m asr.transcribe: error: {missing[0]}: no such audio file"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            file=sys.stderr,
        )
        return 2

    from asr.transcribe.transcribe import Transcriber  # here, not above: --help needs no torch
    from asr.utils.errors import InputError
    from asr.utils.memory import freeze_imports

    freeze_imports()

    try:
        transcriber = Transcriber(args.exp_dir, args.checkpoint, args.greedy, args.device)
        try:
            for path in args.audio:
                result = transcriber(path)
                print(" ".join([result.path, *result.words]), flush=True)
        finally:
            transcriber.close()
    except InputError as err:
        print(f"python -m asr.transcribe: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
