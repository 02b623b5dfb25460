"""A config's values as written: durations, sizes and whole numbers, and
the error that names a bad one (key and value)."""

from __future__ import annotations

import math
import re
from pathlib import Path

MIN_RETENTION: float = 86400.0
# A cap keeps `now - retention` a representable date (year >= 1) everywhere.
MAX_DURATION: float = 1000 * 365 * 86400.0

_UNITS: dict[str, int] = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# [0-9], not \d: \d also takes other scripts' digits ("３０d").
_DURATION = re.compile(r"([0-9]+)([mhdw])")
_GRAMMAR = "a whole number followed by m, h, d or w"
_SIZE_UNITS: dict[str, int] = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"([0-9]+)([KMGT])")
_SIZE_GRAMMAR = "a whole number followed by K, M, G or T"


class ConfigError(Exception):
    """A config that must not be used. `str()` names the file, key and value:
    `<path>: retention = '30x': not a duration (...)`. `value` is None when
    there is none to show (TOML has no null, so None never is a real value)."""

    def __init__(
        self, message: str, key: str | None = None, value: object = None, path: Path | None = None
    ) -> None:
        super().__init__(message)
        self.message, self.key, self.value, self.path = message, key, value, path

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path is not None else ""
        if self.key is None:
            return f"{where}{self.message}"
        shown = "" if self.value is None else f" = {self.value!r}"
        return f"{where}{self.key}{shown}: {self.message}"


def parse_duration(text: object, key: str, *, allow_zero: bool = False) -> float:
    """Seconds in a duration string (`90m`, `720h`, `30d`, `4w`; `"0"` too
    when `allow_zero`). Anything else is a ConfigError naming key and value."""
    if not isinstance(text, str):
        raise ConfigError(
            f'not a duration (write it as a string: {_GRAMMAR}, e.g. "30d")', key, text
        )
    if allow_zero and text == "0":
        return 0.0
    match = _DURATION.fullmatch(text)
    if match is None:
        zero = ', or "0"' if allow_zero else ""
        raise ConfigError(f"not a duration ({_GRAMMAR}{zero})", key, text)
    digits, unit = match.groups()
    # Length first: int() of thousands of digits raises, and such a number is too long anyway.
    if len(digits) > 15 or int(digits) * _UNITS[unit] > MAX_DURATION:
        raise ConfigError("too long (at most 1000 years)", key, text)
    seconds = float(int(digits) * _UNITS[unit])
    if seconds == 0 and not allow_zero:
        raise ConfigError("must be longer than zero", key, text)
    return seconds


def parse_size(text: object, key: str) -> int:
    """Bytes in a size string (`500M`, `20G`: powers of 1024). Anything else
    is a ConfigError naming key and value."""
    match = _SIZE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(f'not a size ({_SIZE_GRAMMAR}, e.g. "20G")', key, text)
    digits, unit = match.groups()
    if len(digits) > 12 or int(digits) == 0:
        raise ConfigError("must be more than zero and less than a million T", key, text)
    return int(digits) * _SIZE_UNITS[unit]


def check_retention(seconds: float, key: str, *, value: object = None) -> None:
    """Refuse a retention under 24 hours (invariant 1: nothing updated in the
    last day is ever pruned). `value` is what to show, default the seconds."""
    # Written as "not >=" so that NaN is refused too; inf has no cutoff date.
    if not (math.isfinite(seconds) and seconds >= MIN_RETENTION):
        raise ConfigError(
            "refused: nothing updated in the last 24 hours is ever pruned "
            "(a retention must be at least 1d)",
            key,
            seconds if value is None else value,
        )


def parse_retention(text: object, key: str) -> float:
    """Seconds in a retention: a duration of at least a day."""
    seconds = parse_duration(text, key)
    check_retention(seconds, key, value=text)
    return seconds


def whole(value: object, key: str, least: int, most: float = math.inf) -> int:
    """A TOML integer from `least` to `most`; ConfigError otherwise."""
    # bool is a subclass of int in Python; `true` is not a count.
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ConfigError(f"must be a whole number of at least {least}", key, value)
    return value
