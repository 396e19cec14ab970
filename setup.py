from setuptools import find_packages, setup

setup(
    name="asr",
    version="0.1.0",
    description="Distributed LSTM acoustic-model training for Switchboard, with Kaldi-style recipes",
    python_requires=">=3.10",
    packages=find_packages(include=["asr", "asr.*"]),
    install_requires=[
        # A range, so that an environment with its own torch build (CUDA, ROCm) keeps it; the
        # version tested is the Makefile's TORCH, installed before this package.
        "torch>=2.4,<3",
        "numpy",
        "scipy",
        "kaldiio>=2.18",
        "sentencepiece>=0.2",
        "hydra-core>=1.3,<1.4",
        "jiwer>=4.0",
        "soundfile>=0.12",
        "espeakng-loader>=0.2",
        "matplotlib>=3.8",
        "tqdm",
        "tensorboard>=2.14",  # training telemetry (asr/train/telemetry.py)
        "flashlight-text>=0.0.7",  # KenLM binding used by the LM beam search (asr/decode/beam.py)
        "av>=12",  # FFmpeg's shorten decoder, for shorten-compressed SPHERE (asr/data/shorten.py)
        # The k2-fsa team's Kaldi parts: HMM topology, transition model, diagonal GMMs, aligner and
        # lattice decoder (kaldi-hmm-gmm); OpenFst (kaldifst); ARPA to G.fst (kaldilm).
        "kaldi-hmm-gmm>=1.1.4,<2",
        # kaldi-hmm-gmm 1.1.4 is built against kaldifst 1.7's OpenFst (ArcTpl<W>): it refuses the
        # FSTs of kaldifst 1.8 (ArcTpl<W, int, int>), 1.7.10 and older use another pybind11 ABI,
        # and importing 1.8 before kaldi_hmm_gmm deadlocks.
        "kaldifst>=1.7.17,<1.8",
        "kaldilm>=1.15",
    ],
    extras_require={
        # pytest-xdist: `make test` runs the suite on two workers (Makefile, CONTRIBUTING.md).
        "dev": ["pytest>=8", "pytest-xdist>=3.8,<4", "filelock>=3", "kaldi-native-fbank>=1.20", "ruff>=0.6,<1"],
    },
)
