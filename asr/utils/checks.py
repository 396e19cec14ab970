"""Value checks for the config schema.

Each config dataclass declares `CHECKS = {"key": check, ...}` (a ClassVar, so it is no config
key); asr.config runs them on the composed config before a stage starts. A check takes the
value and returns what is wrong with it, or None.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

Check = Callable[[Any], "str | None"]


def at_least(bound: float) -> Check:
    return lambda v: None if v >= bound else f"must be at least {bound}"


def above(bound: float) -> Check:
    return lambda v: None if v > bound else f"must be greater than {bound}"


def between(low: float, high: float, high_open: bool = False) -> Check:
    """low <= v <= high (v < high when high_open)."""

    def check(v):
        inside = low <= v < high if high_open else low <= v <= high
        return None if inside else f"must be in [{low}, {high}{')' if high_open else ']'}"

    return check


def one_of(*choices: str) -> Check:
    return lambda v: None if v in choices else f"choose one of {', '.join(choices)}"


def each(check: Check) -> Check:
    """A check applied to every element of a list."""

    def check_all(values: Iterable):
        for value in values:
            problem = check(value)
            if problem:
                return f"{value!r}: {problem}"
        return None

    return check_all


def subset_of(*choices: str) -> Check:
    return each(one_of(*choices))


def device_name(v: str) -> str | None:
    """auto | cpu | cuda | cuda:N"""
    if v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()):
        return None
    return "choose auto, cpu, cuda or cuda:N"


POSITIVE = above(0)
NON_NEGATIVE = at_least(0)
AT_LEAST_ONE = at_least(1)
FRACTION = between(0.0, 1.0)
