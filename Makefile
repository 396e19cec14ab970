# make install   set up everything (system packages where possible, a venv with the toolkit)
# make demo      run the mini recipe end to end on the synthetic corpus (prints a WER table);
#                make demo DEMO='--exp hybrid experiment=hybrid' runs the hybrid BLSTM-HMM system
# make lint      ruff check and ruff format --check over asr/ and tests/ (settings: pyproject.toml)
# make test      run the test suite (CPU only) in two phases: on 2 pytest-xdist workers, then the
#                tests marked `exclusive` alone; make test TESTS=tests/faults runs a part of it
# make test-avx2 the same suite as an AVX2-only CPU runs it (no AVX-512, no bf16 kernels)
# make test-avx512 the same suite as an AVX-512 CPU without bf16 hardware runs it (bf16 emulated)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The torch version tested, installed first; setup.py accepts a range, so a CUDA build already installed stays.
TORCH := torch==2.13.0

.PHONY: install demo lint test test-avx2 test-avx512 gpu-check clean-demo

# oneDNN, ATen and MKL each pick kernels by instruction set; capping all three reproduces an
# AVX2-only CPU (no bf16 LSTM, AVX2 round-off) on an AVX-512 or AMX machine.
AVX2_ONLY := ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
# Below oneDNN's AVX512_CORE_BF16 (and MKL's AVX512_E3), an AVX-512 machine with bf16 hardware runs
# bf16 as one without it does: emulated, about 3x slower than fp32 (asr/utils/device.py).
AVX512_NO_BF16 := ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI ATEN_CPU_CAPABILITY=avx512 MKL_ENABLE_INSTRUCTIONS=AVX512_E1

install: $(STAMP)

# KenLM compiles (CPU-bound) in the background while pip downloads and unpacks (I/O-bound) and
# everything is imported once. pip writes no bytecode (--no-compile): compiling all it installs
# took 20 CPU-s for torch alone, mostly modules the toolkit never imports. That import writes
# the bytecode of what the stages import (even where PYTHONDONTWRITEBYTECODE is set); anything
# else is compiled when first imported.
$(STAMP): setup.py scripts/install_system.sh scripts/build_kenlm.sh
	bash scripts/install_system.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	bash scripts/build_kenlm.sh $(VENV) & kenlm=$$!; \
	$(PY) -m pip install -q --no-compile $(TORCH) && $(PY) -m pip install -q --no-compile -e '.[dev]' && \
	$(CACHE_BYTECODE) $(PY) -c "$(STAGE_IMPORTS); print('asr toolkit installed, torch', torch.__version__)"; \
	status=$$?; wait $$kenlm; exit $$status
	touch $(STAMP)

# The libraries the stages, torchrun and the learners import (torch.optim imports torch._dynamo).
STAGE_IMPORTS := import asr.config, torch, torch._dynamo, torch.distributed.run, numpy, scipy.signal, scipy.linalg, \
  matplotlib.pyplot, hydra, omegaconf, yaml, tqdm, kaldiio, sentencepiece, jiwer, soundfile, kaldi_hmm_gmm, \
  kaldifst, kaldilm, kaldi_native_fbank

# two learners (SSGD) with the single process's global batch: conf/experiment/mini_ssgd.yaml
DEMO ?= --nproc 2 experiment=mini_ssgd

demo: install
	cd recipes/mini && ./run.sh $(DEMO)

lint: install
	$(VENV)/bin/ruff check asr tests
	$(VENV)/bin/ruff format --check asr tests

TESTS ?= tests
TEST_WORKERS ?= 2
# Phase 1 runs every test not marked `exclusive` on TEST_WORKERS processes, each test file on one
# worker (its module fixtures built once; tests/conftest.py hands out the slow files first);
# phase 2 runs the `exclusive` ones, whose assertions depend on timing, alone. Both phases run
# even if the first fails; either failing fails the target.
# Exit status 5 is pytest's "no tests collected": a TESTS with no exclusive test is no failure.
# Phase 2 collects only the files that mark a test exclusive (collecting every file costs seconds);
# a TESTS that grep cannot read as paths (a test id) is collected whole.
# The suite starts hundreds of Python processes (stages, learners, torchrun agents), so it turns
# on Python's bytecode cache where the environment has turned it off (PYTHONDONTWRITEBYTECODE):
# each module of asr/ and tests/ is then compiled once, not once a process (and a later run reuses
# the test modules pytest rewrote).
CACHE_BYTECODE := PYTHONDONTWRITEBYTECODE=
define run_tests
status=0; \
$(CACHE_BYTECODE) $(1) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m 'not exclusive' $(TESTS) || [ $$? -eq 5 ] || status=1; \
exclusive=$$(grep -rlE --include='*.py' 'mark\.exclusive' $(TESTS) 2>/dev/null) || exclusive="$(TESTS)"; \
$(CACHE_BYTECODE) $(1) $(PY) -m pytest -q -p no:xdist -m exclusive $$exclusive || [ $$? -eq 5 ] || status=1; \
exit $$status
endef

test: install
	$(call run_tests,)

test-avx2: install
	$(call run_tests,$(AVX2_ONLY))

test-avx512: install
	$(call run_tests,$(AVX512_NO_BF16))

# On a GPU machine: tests/gpu, the CUDA exchange tests and the Switchboard model's throughput
# in one JSON (exp/gpu_check/gpu_check.json; scripts/gpu_check.py). GPU_CHECK=--device cpu runs
# it with the CPU standing in.
gpu-check: install
	$(PY) scripts/gpu_check.py $(GPU_CHECK)

clean-demo:
	rm -rf recipes/mini/corpus recipes/mini/data recipes/mini/feats recipes/mini/lang recipes/mini/exp
