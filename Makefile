# make install   set up everything (system packages where possible, a venv with the toolkit)
# make demo      run the mini recipe end to end on the synthetic corpus (prints a WER table);
#                make demo DEMO='--exp hybrid experiment=hybrid' runs the hybrid BLSTM-HMM system
# make lint      ruff check and ruff format --check over asr/ and tests/ (settings: pyproject.toml)
# make test      run the test suite (CPU only)
# make test-avx2 the same suite as an AVX2-only CPU runs it (no AVX-512, no bf16 kernels)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The torch version tested, installed first; setup.py accepts a range, so a CUDA build already installed stays.
TORCH := torch==2.13.0

.PHONY: install demo lint test test-avx2 clean-demo

# oneDNN, ATen and MKL each pick kernels by instruction set; capping all three reproduces an
# AVX2-only CPU (no bf16 LSTM, AVX2 round-off) on an AVX-512 or AMX machine.
AVX2_ONLY := ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2

install: $(STAMP)

$(STAMP): setup.py scripts/install_system.sh scripts/build_kenlm.sh
	bash scripts/install_system.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev]'
	bash scripts/build_kenlm.sh $(VENV)
	$(PY) -c "import asr.config, torch, kaldiio, sentencepiece, jiwer, soundfile, kaldi_hmm_gmm, kaldifst, kaldilm; print('asr toolkit installed, torch', torch.__version__)"
	touch $(STAMP)

DEMO ?=

demo: install
	cd recipes/mini && ./run.sh $(DEMO)

lint: install
	$(VENV)/bin/ruff check asr tests
	$(VENV)/bin/ruff format --check asr tests

test: install
	$(PY) -m pytest -q tests

test-avx2: install
	$(AVX2_ONLY) $(PY) -m pytest -q tests

clean-demo:
	rm -rf recipes/mini/corpus recipes/mini/data recipes/mini/feats recipes/mini/lang recipes/mini/exp
