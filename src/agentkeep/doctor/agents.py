"""The agents' own clean-up settings: whether Claude Code's or Gemini CLI's
sweep removes sessions before agentkeep's retention decides."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import structlog

from agentkeep.adapters.claude import ClaudeAdapter
from agentkeep.adapters.gemini import GeminiAdapter
from agentkeep.config import Config
from agentkeep.disk import read_regular
from agentkeep.doctor.check import Check
from agentkeep.paths import Env

log = structlog.get_logger("agentkeep.doctor")

DAY = 86400.0
# Claude Code's sweep when settings.json does not set cleanupPeriodDays.
CLAUDE_DEFAULT_DAYS = 30
# Gemini CLI's general.sessionRetention when the settings do not say
# (settingsSchema.ts, on since 0.33), and how it reads a period.
GEMINI_DEFAULT_RETENTION: dict[str, Any] = {"enabled": True, "maxAge": "30d"}
GEMINI_AGE = re.compile(r"([0-9]+)([hdwm])")
GEMINI_UNITS = {"h": 3600.0, "d": DAY, "w": 7 * DAY, "m": 30 * DAY}


def _settings(path: Path, *, comments: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    """An agent's settings.json: (data, None), (None, None) when absent,
    (None, why) when it cannot be read as a JSON object. With `comments`,
    `//` and `/* */` comments are allowed, as Gemini CLI allows them."""
    try:
        text = read_regular(path).decode("utf-8")  # never hangs on a FIFO
        data = json.loads(_JSON_COMMENT.sub(_uncomment, text) if comments else text)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        log.warning("agent settings unreadable", path=str(path), error=str(exc))
        return None, f"{path} cannot be read: {exc}"
    if not isinstance(data, dict):
        return None, f"{path} is not a JSON object"
    return data, None


# A JSON string (kept whole, so that a `//` inside one is no comment) or a
# comment outside strings.
_JSON_COMMENT = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.S)


def _uncomment(match: re.Match[str]) -> str:
    return match[0] if match[0].startswith('"') else " "


def _text(seconds: float) -> str:
    if seconds % DAY == 0:
        return f"{int(seconds // DAY)}d"
    return f"{int(seconds // 3600)}h"


def _retention_text(config: Config, agent: str) -> str | None:
    text = config.agent_retention_text.get(agent, config.retention_text)
    seconds = config.retention_for(agent)
    return text if text is not None else (None if seconds is None else _text(seconds))


def _claude_settings(env: Env) -> Path:
    config_dir = next(r.path for r in ClaudeAdapter(env).roots() if r.kind == "config")
    return config_dir / "settings.json"


def _claude_days(data: dict[str, Any] | None) -> tuple[float | None, str]:
    """Claude's sweep period and the setting in words; None when Claude
    skips its sweep (2.1.x rejects a value under 1 and then does not sweep)."""
    if "cleanupPeriodDays" not in (data or {}):
        return CLAUDE_DEFAULT_DAYS, f"cleanupPeriodDays is not set (default {CLAUDE_DEFAULT_DAYS})"
    value = (data or {})["cleanupPeriodDays"]
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
        return float(value), f"cleanupPeriodDays is {value:g}"
    return None, f"cleanupPeriodDays is {json.dumps(value)}"


def check_claude(env: Env, config: Config) -> Check:
    path = _claude_settings(env)
    data, unreadable = _settings(path)
    days, setting = _claude_days(data)
    if unreadable:
        days = CLAUDE_DEFAULT_DAYS
        setting = f"{unreadable}; assuming the default {CLAUDE_DEFAULT_DAYS}"
    if days is None:
        return Check(
            "claude",
            False,
            f"{setting}: Claude Code 2.1 rejects it and skips its own clean-up, and older"
            " versions stop writing transcripts at all",
            f'set "cleanupPeriodDays": 99999 in {path} to leave the clean-up to agentkeep',
        )
    sweep = f"Claude Code deletes sessions idle over {days:g} days when it starts ({setting})"
    if "claude" not in config.enabled:
        return Check("claude", True, f"{sweep}; agentkeep does not manage Claude (not in enabled)")
    retention = config.retention_for("claude")
    if retention is None:
        return Check(
            "claude",
            True,
            f"{sweep}; it is the only clean-up of Claude sessions (agentkeep has no retention)",
        )
    text = _retention_text(config, "claude")
    if days * DAY < retention:
        needed = math.ceil(retention / DAY)
        return Check(
            "claude",
            False,
            f"{sweep}: Claude deletes first, before agentkeep's {text} retention, "
            "live and resumable sessions included",
            f'set "cleanupPeriodDays": {needed} (or more) in {path}, so agentkeep decides',
        )
    return Check("claude", True, f"{sweep}, after agentkeep's {text} retention")


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
    path = GeminiAdapter(env).root / "settings.json"
    data, unreadable = _settings(path, comments=True)
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
    fix = f"set general.sessionRetention.enabled to false in {path}, so agentkeep decides"
    if config.retention_for("gemini") is None:
        fix += f' (and give agentkeep a retention: retention = "30d" in {env.config_path})'
    return Check(
        "gemini",
        False,
        f"{sweep}: it has deleted resumed sessions, and knows nothing of agentkeep's leases",
        fix,
    )
