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

DAY = 86400.0
# Claude Code's sweep when settings.json does not set cleanupPeriodDays,
# and Qwen Code's when general.cleanupPeriodDays is not set.
CLAUDE_DEFAULT_DAYS = 30
QWEN_DEFAULT_DAYS = 30
# Gemini CLI's general.sessionRetention when the settings do not say
# (settingsSchema.ts, on since 0.33), and how it reads a period.
GEMINI_DEFAULT_RETENTION: dict[str, Any] = {"enabled": True, "maxAge": "30d"}
GEMINI_AGE = re.compile(r"([0-9]+)([hdwm])")
GEMINI_UNITS = {"h": 3600.0, "d": DAY, "w": 7 * DAY, "m": 30 * DAY}


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


def _text(seconds: float) -> str:
    if seconds % DAY == 0:
        return f"{int(seconds // DAY)}d"
    return f"{int(seconds // 3600)}h"


def _retention_text(config: Config, agent: str) -> str | None:
    text = config.agent_retention_text.get(agent, config.retention_text)
    seconds = config.retention_for(agent)
    return text if text is not None else (None if seconds is None else _text(seconds))


def _claude_days(data: dict[str, Any] | None) -> tuple[float | None, str]:
    """Claude's sweep period and the setting in words; None when Claude
    skips its sweep: 2.1.332 takes a whole number of days from 1 to 2^53-1,
    and anything else is a settings error during which it does not sweep."""
    if "cleanupPeriodDays" not in (data or {}):
        return CLAUDE_DEFAULT_DAYS, f"cleanupPeriodDays is not set (default {CLAUDE_DEFAULT_DAYS})"
    value = (data or {})["cleanupPeriodDays"]
    whole = isinstance(value, int | float) and not isinstance(value, bool) and value == int(value)
    if whole and 1 <= value <= 2**53 - 1:
        return float(value), f"cleanupPeriodDays is {value:g}"
    return None, f"cleanupPeriodDays is {json.dumps(value)}"


def check_claude(env: Env, config: Config) -> Check:
    path, data, unreadable = _settings("claude", env)
    if unreadable:
        return Check(
            "claude",
            False,
            f"{unreadable}: Claude Code reads none of it, and 2.1.332 skips its own clean-up"
            f" until it can (older versions swept at the default {CLAUDE_DEFAULT_DAYS} days)",
            f"correct {path} (plain JSON: Claude Code takes no comments), then {_adopt('claude')}",
        )
    days, setting = _claude_days(data)
    if days is None:
        return Check(
            "claude",
            False,
            f"{setting}: Claude Code 2.1 rejects it and skips its own clean-up, and older"
            " versions stop writing transcripts at all",
            f"{_adopt('claude')}, to leave the clean-up to agentkeep",
        )
    sweep = f"Claude Code deletes sessions idle over {days:g} days when it starts ({setting})"
    return _against("claude", "Claude", sweep, days * DAY, config)


def _against(agent: str, short: str, sweep: str, period: float, config: Config) -> Check:
    """An agent's own sweep, deleting what is idle over `period` seconds,
    against agentkeep's retention for it: a problem when it acts first."""
    if agent not in config.enabled:
        return Check(agent, True, f"{sweep}; agentkeep does not manage {short} (not in enabled)")
    retention = config.retention_for(agent)
    if retention is None:
        return Check(
            agent,
            True,
            f"{sweep}; it is the only clean-up of {short} sessions (agentkeep has no retention)",
        )
    text = _retention_text(config, agent)
    if period < retention:
        return Check(
            agent,
            False,
            f"{sweep}: {short} deletes first, before agentkeep's {text} retention, "
            "live and resumable sessions included",
            f"{_adopt(agent)}, so agentkeep decides",
        )
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
        return QWEN_DEFAULT_DAYS * DAY, (
            f"general.cleanupPeriodDays is not set (default {QWEN_DEFAULT_DAYS})"
        )
    setting = f"general.cleanupPeriodDays is {json.dumps(value)}"
    days = _js_number(value)
    if days > 0:
        return days * DAY, setting
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
    path, data, unreadable = _settings("qwen", env)
    if unreadable:
        return Check(
            "qwen",
            False,
            f"{unreadable}: Qwen Code cannot read it either",
            f"correct {path}, then {_adopt('qwen')}",
        )
    period, setting = _qwen_period(data)
    idle = f"{period / DAY:g} days" if period >= DAY else "an hour"
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
    floor = _gemini_age(policy.get("minRetention")) or DAY
    if age is not None and age < floor:
        return "its maxAge is below its minRetention, so it does not run"
    if count is not None and not (isinstance(count, int | float) and count >= 1):
        return "its maxCount is below 1, so it does not run"
    if age is None and count is None:
        return "it has neither maxAge nor maxCount, so it does not run"
    return None


def _gemini_age(value: object) -> float | None:
    match = GEMINI_AGE.fullmatch(value) if isinstance(value, str) else None
    if match is None or int(match[1]) == 0:
        return None
    return int(match[1]) * GEMINI_UNITS[match[2]]


def check_gemini(env: Env, config: Config) -> Check:
    path, data, unreadable = _settings("gemini", env)
    if unreadable:
        return Check(
            "gemini",
            True,
            f"{unreadable}; Gemini CLI refuses to start with it, so its own clean-up cannot run",
        )
    stated = _gemini_policy(data)
    # As Gemini CLI reads it: its defaults (on, 30 days, since 0.33) under
    # what the settings say.
    policy = {**GEMINI_DEFAULT_RETENTION, **stated}
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
    return Check(
        "gemini",
        False,
        f"{sweep}: it has deleted resumed sessions, and knows nothing of agentkeep's leases",
        fix,
    )
