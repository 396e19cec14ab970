# make install   set up everything (system packages where possible, a venv with the toolkit)
# make demo      run the mini recipe end to end on the synthetic corpus (prints a WER table)
# make test      run the test suite (CPU only)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0

.PHONY: install demo test clean-demo

install: $(STAMP)

$(STAMP): setup.py scripts/install_system.sh scripts/build_kenlm.sh
	bash scripts/install_system.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev]'
	bash scripts/build_kenlm.sh $(VENV)
	$(PY) -c "import asr.config, torch, kaldiio, sentencepiece, jiwer, soundfile; print('asr toolkit installed, torch', torch.__version__)"
	touch $(STAMP)

demo: install
	cd recipes/mini && ./run.sh

test: install
	$(PY) -m pytest -q tests

clean-demo:
	rm -rf recipes/mini/corpus recipes/mini/data recipes/mini/feats recipes/mini/lang recipes/mini/exp
