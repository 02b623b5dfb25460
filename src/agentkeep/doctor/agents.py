"""The agents' own clean-up settings: whether Claude Code's, Gemini CLI's or
Qwen Code's sweep removes what belongs to sessions before agentkeep's
retention decides; the fix is `agentkeep adopt <agent>` (adopt/)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import structlog

from agentkeep import fsio, jsonedit
from agentkeep.adopt.settings import SETTINGS
from agentkeep.config import Config
from agentkeep.doctor.check import Check
from agentkeep.paths import Env

log = structlog.get_logger("agentkeep.doctor")

_DAY = 86400.0
# Claude Code's and Qwen Code's sweep when their settings do not set one.
_DEFAULT_DAYS = 30
# Gemini CLI's general.sessionRetention when the settings do not say
# (settingsSchema.ts, on since 0.33), and how it reads a period.
_GEMINI_DEFAULT: dict[str, Any] = {"enabled": True, "maxAge": "30d"}
_GEMINI_AGE = re.compile(r"([0-9]+)([hdwm])")
_GEMINI_UNITS = {"h": 3600.0, "d": _DAY, "w": 7 * _DAY, "m": 30 * _DAY}


def _settings(agent: str, env: Env) -> tuple[Path, dict[str, Any] | None, str | None]:
    """An agent's settings file and its data as the agent reads it: (path,
    data, None), (path, None, None) when absent, (path, None, why) when it
    cannot be read as a JSON object the agent can read."""
    setting = SETTINGS[agent]
    path = setting.locate(env)
    try:
        # Never hangs on a FIFO, moves no atime; followed, as the agent follows it.
        text = fsio.read_regular(path, limit=fsio.SMALL_FILE_LIMIT, follow=True).decode("utf-8")
        data = jsonedit.parse(text, setting.dialect).root.value
    except FileNotFoundError:
        return path, None, None
    except (OSError, ValueError) as exc:
        log.warning("agent settings unreadable", path=str(path), error=str(exc))
        return path, None, f"{path} cannot be read: {exc}"
    if not isinstance(data, dict):
        return path, None, f"{path} is not a JSON object"
    return path, data, None


def _claude_days(data: dict[str, Any] | None) -> tuple[float | None, str]:
    """Claude's sweep period and the setting in words; None when Claude
    skips its sweep: 2.1.332 takes a whole number of days from 1 to 2^53-1,
    and anything else is a settings error during which it does not sweep."""
    if "cleanupPeriodDays" not in (data or {}):
        return _DEFAULT_DAYS, f"cleanupPeriodDays is not set (default {_DEFAULT_DAYS})"
    value = (data or {})["cleanupPeriodDays"]
    whole = isinstance(value, int | float) and not isinstance(value, bool) and value == int(value)
    if whole and 1 <= value <= 2**53 - 1:
        return float(value), f"cleanupPeriodDays is {value:g}"
    return None, f"cleanupPeriodDays is {json.dumps(value)}"


def check_claude(env: Env, config: Config) -> Check:
    """Whether Claude Code's own sweep acts before agentkeep's retention."""
    path, data, unreadable = _settings("claude", env)
    if unreadable:
        detail = (
            f"{unreadable}: Claude Code reads none of it, and 2.1.332 skips its own clean-up"
            f" until it can (older versions swept at the default {_DEFAULT_DAYS} days)"
        )
        fix = f"correct {path} (plain JSON: Claude Code takes no comments), then {_adopt('claude')}"
        return Check("claude", False, detail, fix)
    days, setting = _claude_days(data)
    if days is None:
        detail = (
            f"{setting}: Claude Code 2.1 rejects it and skips its own clean-up, and older"
            " versions stop writing transcripts at all"
        )
        fix = f"{_adopt('claude')}, to leave the clean-up to agentkeep"
        return Check("claude", False, detail, fix)
    sweep = f"Claude Code deletes sessions idle over {days:g} days when it starts ({setting})"
    return _against("claude", "Claude", sweep, days * _DAY, config)


def _against(agent: str, short: str, sweep: str, period: float, config: Config) -> Check:
    """An agent's own sweep, deleting what is idle over `period` seconds,
    against agentkeep's retention for it: a problem when it acts first."""
    if agent not in config.enabled:
        return Check(agent, True, f"{sweep}; agentkeep does not manage {short} (not in enabled)")
    retention = config.retention_for(agent)
    if retention is None:
        only = f"it is the only clean-up of {short} sessions (agentkeep has no retention)"
        return Check(agent, True, f"{sweep}; {only}")
    # A retention in effect always has its text: the config keeps it as written.
    text = config.agent_retention_text.get(agent, config.retention_text)
    if period < retention:
        first = f"{short} deletes first, before agentkeep's {text} retention"
        detail = f"{sweep}: {first}, live and resumable sessions included"
        return Check(agent, False, detail, f"{_adopt(agent)}, so agentkeep decides")
    return Check(agent, True, f"{sweep}, after agentkeep's {text} retention")


def _adopt(agent: str) -> str:
    return f"`agentkeep adopt {agent}`"


def _qwen_period(data: dict[str, Any] | None) -> tuple[float, str]:
    """Qwen's sweep period in seconds and the setting in words, as Qwen Code
    0.24.4 reads it: `cleanupPeriodDays > 0 ? days : one hour`, JavaScript's
    comparison taking any value."""
    general = (data or {}).get("general")
    value = general.get("cleanupPeriodDays") if isinstance(general, dict) else None
    if value is None:
        unset = f"general.cleanupPeriodDays is not set (default {_DEFAULT_DAYS})"
        return _DEFAULT_DAYS * _DAY, unset
    setting = f"general.cleanupPeriodDays is {json.dumps(value)}"
    days = _js_number(value)
    if days > 0:
        return days * _DAY, setting
    return 3600.0, f"{setting}, which Qwen Code takes as one hour"


def _js_number(value: object) -> float:
    """`value` as JavaScript's `>` compares it with a number (NaN: never more)."""
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip() or 0)
        except ValueError:
            return math.nan
    return math.nan


def check_qwen(env: Env, config: Config) -> Check:
    """Whether Qwen Code's own sweep acts before agentkeep's retention."""
    path, data, unreadable = _settings("qwen", env)
    if unreadable:
        detail = f"{unreadable}: Qwen Code cannot read it either"
        return Check("qwen", False, detail, f"correct {path}, then {_adopt('qwen')}")
    period, setting = _qwen_period(data)
    idle = f"{period / _DAY:g} days" if period >= _DAY else "an hour"
    sweep = (
        f"Qwen Code deletes the file history, debug logs and subagent transcripts of sessions"
        f" idle over {idle} ({setting}), in its terminal sessions, at most once a day (the"
        " chats stay)"
    )
    return _against("qwen", "Qwen", sweep, period, config)


def _gemini_policy(data: dict[str, Any] | None) -> dict[str, Any]:
    """general.sessionRetention as the user's settings set it."""
    general = (data or {}).get("general")
    policy = general.get("sessionRetention") if isinstance(general, dict) else None
    return policy if isinstance(policy, dict) else {}


def _gemini_off(policy: dict[str, Any]) -> str | None:
    """Why Gemini's own clean-up does not run under `policy`, or None. It
    runs when `enabled` is truthy (as JavaScript has it) and the policy
    validates: maxAge a positive <n>h|d|w|m, no shorter than minRetention,
    or a maxCount of 1 or more."""
    enabled = policy.get("enabled")
    if enabled in (False, None, 0, ""):
        return "general.sessionRetention.enabled is false"
    age, count = _gemini_age(policy.get("maxAge")), policy.get("maxCount")
    if policy.get("maxAge") and age is None:
        return f"its maxAge {policy.get('maxAge')!r} is not valid, so it does not run"
    floor = _gemini_age(policy.get("minRetention")) or _DAY
    if age is not None and age < floor:
        return "its maxAge is below its minRetention, so it does not run"
    if count is not None and not (isinstance(count, int | float) and count >= 1):
        return "its maxCount is below 1, so it does not run"
    if age is None and count is None:
        return "it has neither maxAge nor maxCount, so it does not run"
    return None


def _gemini_age(value: object) -> float | None:
    match = _GEMINI_AGE.fullmatch(value) if isinstance(value, str) else None
    if match is None or int(match[1]) == 0:
        return None
    return int(match[1]) * _GEMINI_UNITS[match[2]]


def check_gemini(env: Env, config: Config) -> Check:
    """Whether Gemini CLI's own sweep runs (it deletes resumed sessions too)."""
    path, data, unreadable = _settings("gemini", env)
    if unreadable:
        refuses = "Gemini CLI refuses to start with it, so its own clean-up cannot run"
        return Check("gemini", True, f"{unreadable}; {refuses}")
    stated = _gemini_policy(data)
    # As Gemini CLI reads it: its defaults (on, 30 days, since 0.33) under
    # what the settings say.
    policy = {**_GEMINI_DEFAULT, **stated}
    off = _gemini_off(policy)
    if off is not None:
        return Check("gemini", True, f"Gemini CLI's own session clean-up is off ({off})")
    age, count = policy.get("maxAge"), policy.get("maxCount")
    rule = " and ".join(
        [*([f"idle over {age}"] if age else []), *([f"past the newest {count:g}"] if count else [])]
    )
    setting = "general.sessionRetention" + ("" if "enabled" in stated else ", on by default")
    sweep = (
        f"Gemini CLI deletes the sessions of the project it starts in {rule} ({setting}), "
        "and, at any age, each chat it cannot resume with every chat of the same 8-character "
        "id: a resume in a later minute leaves such a chat, so the resumed session goes too"
    )
    if "gemini" not in config.enabled:
        return Check("gemini", True, f"{sweep}; agentkeep does not manage Gemini")
    fix = f"{_adopt('gemini')} (it sets general.sessionRetention.enabled to false in {path})"
    if config.retention_for("gemini") is None:
        fix += f' (and give agentkeep a retention: retention = "30d" in {env.config_path})'
    detail = f"{sweep}: it has deleted resumed sessions, and knows nothing of agentkeep's leases"
    return Check("gemini", False, detail, fix)
