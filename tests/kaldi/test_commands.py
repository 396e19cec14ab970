"""Commands in data files (asr.kaldi.commands, asr.data.audio): which wav.scp entries are read
natively and which need a shell, checked against what /bin/sh would hand sph2pipe; and the
policy that runs, refuses or reports them."""

from __future__ import annotations

import logging
import shlex
import subprocess

import numpy as np
import pytest
import soundfile as sf

from asr.data.audio import parse_wav_scp_entry, read_recording, shell_command
from asr.kaldi import commands

NATIVE = [
    "sph2pipe -f wav -p -c 2 /c/LDC97S62/swb1_d1/data/sw02001.sph |",
    "sph2pipe -f wav -p -c 1 " + shlex.quote("/c/LDC copies 'v2' $x/sw02001.sph") + " |",
    "/usr/bin/sph2pipe -p -f wav /c/en_4156.sph|",
    "sph2pipe -c 1 -f wav -p '/c/a;b|c.sph' |",
]
COMMANDS = [
    "sph2pipe -f wav -p -c 1 /x.sph; touch /tmp/owned |",  # shell syntax after the file
    "sph2pipe -f wav -p -c 1 /x.sph /y.sph |",  # two files
    "sph2pipe -t 1:2 /x.sph |",  # an option we do not implement
    "sph2pipe -f wav -c 0 /x.sph |",  # no channel 0
    "sph2pipe -f wav 'unbalanced |",
    "cat /x.wav |",
    "gunzip -c /x.wav.gz | sox -t wav - -t wav - speed 0.9 |",  # the perturbation is native, its input is not
]


def shell_words(command: str, tmp_path) -> list[str]:
    """The arguments /bin/sh gives sph2pipe for `command` (a stand-in prints them)."""
    fake = tmp_path / "sph2pipe"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    inner = command.rstrip().removesuffix("|").replace("/usr/bin/sph2pipe", "sph2pipe", 1)
    proc = subprocess.run(
        ["/bin/sh", "-c", inner], env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, capture_output=True, text=True
    )
    return proc.stdout.splitlines()


@pytest.mark.parametrize("entry", NATIVE)
def test_native_reads_take_the_file_and_channel_the_shell_would_give_sph2pipe(entry, tmp_path):
    source = parse_wav_scp_entry(entry)
    words = shell_words(entry, tmp_path)
    assert source.command is None and shell_command(entry) is None
    assert source.path == words[-1]  # the one positional argument
    channel = int(words[words.index("-c") + 1]) if "-c" in words else 1  # sph2pipe's default: the first
    assert source.channel + 1 == channel


@pytest.mark.parametrize("entry", COMMANDS)
def test_anything_else_is_a_command(entry):
    assert shell_command(entry) is not None


def test_speed_perturbed_native_entry_runs_nothing():
    assert shell_command("sph2pipe -f wav -p -c 1 /x.sph | sox -t wav - -t wav - speed 1.1 |") is None
    assert shell_command("sox -t wav /x.wav -t wav - speed 0.9 |") is None


def test_policy_runs_refuses_and_reports(tmp_path, caplog):
    wav = tmp_path / "a.wav"
    sf.write(wav, np.zeros(800, dtype=np.float32), 8000)
    marker = tmp_path / "ran"
    entry = f"touch {marker}; cat {wav} |"
    with commands.policy(run=False):
        with pytest.raises(
            commands.CommandNotRun, match="the entry is a command .* not run: a data dir is trusted code"
        ):
            read_recording(entry)
    assert not marker.exists()
    samples, rate = read_recording(entry)  # the default: run, as Kaldi does
    assert marker.exists() and rate == 8000 and len(samples) == 800
    with pytest.raises(commands.InputError, match=r"command failed with exit status 3: 'exit 3'"):
        commands.run_command("exit 3", "wav.scp")

    table = tmp_path / "wav.scp"
    table.write_text(f"a {wav}\nb {entry}\nc cat {wav} |\n")
    with (
        commands.policy(run=False),
        pytest.raises(commands.CommandNotRun, match=rf"{table}:2: entry b is a command .*\(2 such"),
    ):
        commands.check_table(table, shell_command)
    with caplog.at_level(logging.WARNING):
        assert commands.check_table(table, shell_command) == 2
        assert commands.check_table(table, shell_command) == 2  # logged once per file
    assert caplog.text.count("2 entries are commands, run by /bin/sh as Kaldi does") == 1
