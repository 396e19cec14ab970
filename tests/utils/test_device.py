"""Whether bf16 is native on a CPU: the flags, oneDNN's ISA cap and the bf16 LSTM probe, each
faked, for every kind of CPU the project's machines have."""

import re
import threading

import pytest
import torch

from asr.utils import device as devices
from asr.utils.device import cpu_bf16_support, cpu_flags, onednn_isa_cap

AMX = frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile"})
ZEN4 = frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"})
AVX512_ONLY = frozenset({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"})
AVX2_ONLY = frozenset({"avx2", "fma"})


@pytest.mark.parametrize(
    "flags,environ,lstm_runs,native,why",
    [
        (AMX, {}, True, True, r"computes bf16 in hardware \(avx512_bf16, amx_bf16\)"),
        (ZEN4, {}, True, True, r"computes bf16 in hardware \(avx512_bf16\)"),
        (AVX512_ONLY, {}, True, False, r"no bf16 hardware .* emulates bf16, about 3x slower than fp32"),
        (AVX2_ONLY, {}, False, False, r"no bf16 LSTM kernel"),
        # `make test-avx512`: an AMX machine whose oneDNN is kept below its bf16 instructions
        (AMX, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, True, False, r"ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI .* 3x"),
        (AMX, {"DNNL_MAX_CPU_ISA": "avx512_core"}, True, False, r"ONEDNN_MAX_CPU_ISA=AVX512_CORE "),
        (AMX, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, True, True, r"hardware"),
        (AMX, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, True, True, r"hardware"),
        (AMX, {"ONEDNN_MAX_CPU_ISA": "ALL"}, True, True, r"hardware"),
    ],
)
def test_bf16_is_native_only_with_hardware_oneDNN_may_use(monkeypatch, flags, environ, lstm_runs, native, why):
    monkeypatch.setattr(devices, "cpu_bf16_lstm", lambda: lstm_runs)
    support = cpu_bf16_support(flags, environ)
    assert (support.native, support.runs) == (native, lstm_runs)
    assert re.search(why, support.reason), support.reason


def test_onednn_isa_cap_reads_both_names_and_ignores_what_onednn_ignores():
    assert onednn_isa_cap({}) == ("", None)
    assert onednn_isa_cap({"ONEDNN_MAX_CPU_ISA": "avx2"}) == ("AVX2", 0x7)
    assert onednn_isa_cap({"DNNL_MAX_CPU_ISA": "AVX512_CORE_BF16"})[1] & devices.ONEDNN_BF16_BIT
    assert not onednn_isa_cap({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"})[1] & devices.ONEDNN_BF16_BIT
    assert onednn_isa_cap({"ONEDNN_MAX_CPU_ISA": "DEFAULT"})[1] is None


def test_cpu_flags_reads_the_first_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_cpu_name_reads_the_first_model_name(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t\t: avx2\n\nmodel name\t: other\n")
    assert devices.cpu_name(cpuinfo) == "AMD EPYC 9B14"
    assert devices.cpu_name(tmp_path / "missing") != ""  # the platform's name, or "unknown"


SUBNORMAL = 1e-39  # below fp32's smallest normal number, 1.2e-38


def test_flushed_subnormals_are_zero_in_this_thread_and_the_threads_it_starts():
    tiny = torch.tensor([SUBNORMAL])
    assert (tiny * 1.0).item() > 0
    in_thread = []
    try:
        assert devices.flush_denormals()
        assert (tiny * 1.0).item() == 0.0
        started = threading.Thread(target=lambda: in_thread.append((tiny * 1.0).item()))
        started.start()
        started.join()
    finally:
        torch.set_flush_denormal(False)
    assert in_thread == [0.0]
    assert (tiny * 1.0).item() > 0
