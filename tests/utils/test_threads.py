"""Thread counts (asr/utils/threads.py): torch's put back after a block, numpy BLAS's in children."""

import os

import pytest
import torch

from asr.utils.threads import BLAS_THREAD_VARIABLES, one_blas_thread_in_children, torch_threads


def test_torch_threads_sets_the_count_for_the_block_and_puts_it_back():
    before = torch.get_num_threads()
    wanted = 1 if before > 1 else 2
    with torch_threads(wanted):
        assert torch.get_num_threads() == wanted
    assert torch.get_num_threads() == before


def test_torch_threads_puts_the_count_back_when_the_block_raises():
    before = torch.get_num_threads()
    wanted = 1 if before > 1 else 2
    with pytest.raises(KeyError), torch_threads(wanted):
        raise KeyError("stage failed")
    assert torch.get_num_threads() == before


def test_children_get_one_blas_thread_and_the_environment_is_put_back(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    with one_blas_thread_in_children():
        assert all(os.environ[name] == "1" for name in BLAS_THREAD_VARIABLES)
    assert os.environ["OMP_NUM_THREADS"] == "4" and "MKL_NUM_THREADS" not in os.environ
