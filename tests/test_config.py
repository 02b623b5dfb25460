"""The user config: durations, the 24-hour floor, unknown keys, stores' roots.

Files are real TOML files in the fake user's tree; every store-root check is
made against real directories (and a real symlink) so that both the written
and the resolved forms of a path are exercised.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkeep.agents import AGENTS
from agentkeep.config import (
    DEFAULT_MAX_REMOVALS,
    DEFAULT_PRUNE_INTERVAL,
    DEFAULT_TRASH,
    Config,
    StoreConfig,
    load_config,
)
from agentkeep.config.values import MIN_RETENTION, ConfigError, check_retention, parse_duration
from fakehome import FakeHome

UNIT = {"m": 60, "h": 3600, "d": 86400, "w": 604800}
# The grammar, written independently of the module under test.
GRAMMAR = re.compile(r"[0-9]+[mhdw]", re.ASCII)
YEARS_1000 = 1000 * 365 * 86400


def agent_roots(fh: FakeHome) -> dict[str, list[Path]]:
    claude_tmp = f"claude-{os.getuid()}"
    return {
        "claude": [fh.claude, fh.root / "tmp" / claude_tmp, fh.system_tmp / claude_tmp],
        "codex": [fh.codex],
        "opencode": [fh.data / "opencode"],
        "gemini": [fh.home / ".gemini"],
        "grok": [fh.home / ".grok"],
        "zero": [fh.data / "zero" / "sessions"],
    }


def load(fh: FakeHome, text: str | None = None, *, home: Path | None = None) -> Config:
    path = fh.write_config(text) if text is not None else fh.config_path
    return load_config(path, home=home or fh.home, state_dir=fh.state, agent_roots=agent_roots(fh))


def refused(fh: FakeHome, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(fh, text)
    assert str(fh.config_path) in str(info.value)
    return info.value


def store(name: str, root: str | Path, depth: int = 1) -> str:
    return f'[[stores]]\nname = "{name}"\nroot = "{root}"\ndepth = {depth}\n'


# -- the file itself -----------------------------------------------------------


def test_missing_file_means_no_retention_and_defaults(fake_home: FakeHome) -> None:
    config = load(fake_home)
    assert config.exists is False
    assert config.retention is None and config.retention_text is None
    assert not config.has_retention()
    assert config.retention_for("claude") is None
    assert config.prune_interval == DEFAULT_PRUNE_INTERVAL == 6 * 3600
    assert config.max_removals == DEFAULT_MAX_REMOVALS == 200
    assert config.trash == DEFAULT_TRASH == 7 * 86400
    assert config.enabled == AGENTS
    assert config.stores == ()


def test_empty_file_exists_and_has_defaults(fake_home: FakeHome) -> None:
    config = load(fake_home, "")
    assert config.exists is True
    assert config.retention is None
    assert config.enabled == AGENTS


def test_contract_example_loads(fake_home: FakeHome) -> None:
    config = load(
        fake_home,
        """
retention = "30d"
prune_interval = "6h"
max_removals = 200
trash = "7d"
enabled = ["claude", "codex", "opencode", "gemini", "grok", "zero", "qwen", "pi"]

[agents.codex]
retention = "90d"

[[stores]]
name = "codex-issue-stores"
root = "~/.codex/session-stores/default"
depth = 2
""",
    )
    assert config.retention == 30 * 86400 and config.retention_text == "30d"
    assert config.agent_retention == {"codex": 90 * 86400}
    assert config.agent_retention_text == {"codex": "90d"}
    root = fake_home.home / ".codex" / "session-stores" / "default"
    assert config.stores == (StoreConfig("codex-issue-stores", root, 2),)


def test_only_the_given_file_is_read(fake_home: FakeHome, tmp_path: Path) -> None:
    fake_home.write_config('retention = "30d"\n')
    other = tmp_path / "other.toml"
    other.write_text('retention = "60d"\n')
    kw = {"home": fake_home.home, "state_dir": fake_home.state, "agent_roots": {}}
    assert load_config(other, **kw).retention == 60 * 86400  # type: ignore[arg-type]
    missing = load_config(tmp_path / "absent.toml", **kw)  # type: ignore[arg-type]
    assert missing.exists is False and missing.retention is None


def test_invalid_toml_names_the_path_and_the_parse_error(fake_home: FakeHome) -> None:
    exc = refused(fake_home, 'retention = "30d\n')
    assert "not valid TOML" in str(exc) and "line 1" in str(exc)


def test_not_utf8_is_an_error(fake_home: FakeHome) -> None:
    fake_home.config_path.parent.mkdir(parents=True)
    fake_home.config_path.write_bytes(b'retention = "30d" # \xff\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load(fake_home)


def test_directory_in_place_of_the_file_is_an_error(fake_home: FakeHome) -> None:
    fake_home.config_path.mkdir(parents=True)
    with pytest.raises(ConfigError, match="cannot be read"):
        load(fake_home)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_is_an_error(fake_home: FakeHome) -> None:
    path = fake_home.write_config('retention = "30d"\n')
    path.chmod(0)
    with pytest.raises(ConfigError, match="cannot be read"):
        load(fake_home)


def test_link_to_nothing_is_an_error_not_a_missing_file(fake_home: FakeHome) -> None:
    fake_home.config_path.parent.mkdir(parents=True)
    fake_home.config_path.symlink_to(fake_home.root / "nowhere.toml")
    with pytest.raises(ConfigError, match="link to nothing"):
        load(fake_home)


def test_error_text_names_path_key_and_value(fake_home: FakeHome) -> None:
    exc = refused(fake_home, 'retention = "30x"\n')
    assert str(exc) == (
        f"{fake_home.config_path}: retention = '30x': "
        "not a duration (a whole number followed by m, h, d or w)"
    )
    assert (exc.key, exc.value, exc.path) == ("retention", "30x", fake_home.config_path)


# -- durations -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90m", 5400), ("720h", 2592000), ("30d", 2592000), ("4w", 2419200), ("1m", 60)],
)
def test_every_unit_parses(text: str, seconds: int) -> None:
    assert parse_duration(text, "k") == seconds


def test_every_unit_loads_as_retention(fake_home: FakeHome) -> None:
    for text, seconds in [("1440m", 86400), ("48h", 172800), ("2d", 172800), ("1w", 604800)]:
        config = load(fake_home, f'retention = "{text}"\n')
        assert (config.retention, config.retention_text) == (seconds, text)


BAD_DURATIONS: list[object] = [
    "30x", "1.5d", "-3d", "+3d", "30 d", " 30d", "30d ", "30d\n", "", "d", "30", "30D",
    "30dd", "1_000d", "0x1d", "1e3d", "３０d", "30s", "30y", 30, 1.5, True, ["30d"], {"d": 30},
]  # fmt: skip


@pytest.mark.parametrize("value", BAD_DURATIONS, ids=repr)
def test_bad_duration_names_key_and_value(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration(value, "prune_interval")
    assert str(info.value).startswith(f"prune_interval = {value!r}: ")
    assert info.value.value == value


def test_bad_duration_in_file_names_key_and_value(fake_home: FakeHome) -> None:
    exc = refused(fake_home, 'trash = "1.5d"\n')
    assert "trash = '1.5d'" in str(exc)


def test_toml_number_is_not_a_duration(fake_home: FakeHome) -> None:
    exc = refused(fake_home, "prune_interval = 6\n")
    assert "prune_interval = 6" in str(exc) and "string" in str(exc)


@given(st.text(max_size=12).filter(lambda s: not GRAMMAR.fullmatch(s)))
def test_anything_off_the_grammar_is_refused(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration(text, "retention")
    assert str(info.value).startswith(f"retention = {text!r}: ")


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(sorted(UNIT)))
def test_anything_on_the_grammar_is_n_times_unit(n: int, unit: str) -> None:
    if n * UNIT[unit] > YEARS_1000:
        with pytest.raises(ConfigError, match="too long"):
            parse_duration(f"{n}{unit}", "k")
    else:
        assert parse_duration(f"{n}{unit}", "k") == n * UNIT[unit]


def test_leading_zeros_are_still_a_whole_number() -> None:
    assert parse_duration("007d", "k") == 7 * 86400


def test_huge_number_is_an_error_not_a_crash() -> None:
    for text in ("52143w", "9" * 5000 + "d"):
        with pytest.raises(ConfigError, match="too long"):
            parse_duration(text, "retention")
    assert parse_duration("52142w", "retention") == 52142 * 604800


def test_zero_only_where_allowed() -> None:
    for text in ("0", "0d", "00m"):
        with pytest.raises(ConfigError):
            parse_duration(text, "prune_interval")
        assert parse_duration(text, "trash", allow_zero=True) == 0.0


def test_trash_zero_loads(fake_home: FakeHome) -> None:
    assert load(fake_home, 'trash = "0"\n').trash == 0.0


def test_prune_interval_zero_refused(fake_home: FakeHome) -> None:
    exc = refused(fake_home, 'prune_interval = "0"\n')
    assert exc.key == "prune_interval"


def test_prune_interval_is_read(fake_home: FakeHome) -> None:
    assert load(fake_home, 'prune_interval = "30m"\n').prune_interval == 1800


# -- the 24-hour floor ---------------------------------------------------------


@pytest.mark.parametrize("text", ["12h", "23h", "1439m", "0", "0d"])
def test_retention_under_a_day_refused(fake_home: FakeHome, text: str) -> None:
    exc = refused(fake_home, f'retention = "{text}"\n')
    assert exc.key == "retention" and exc.value == text


def test_floor_refusal_says_why(fake_home: FakeHome) -> None:
    exc = refused(fake_home, 'retention = "12h"\n')
    assert "refused: nothing updated in the last 24 hours is ever pruned" in str(exc)
    assert "retention = '12h'" in str(exc)


@pytest.mark.parametrize(("text", "seconds"), [("1d", 86400), ("1440m", 86400), ("24h", 86400)])
def test_retention_of_a_day_accepted(fake_home: FakeHome, text: str, seconds: int) -> None:
    assert load(fake_home, f'retention = "{text}"\n').retention == seconds


def test_check_retention_floor() -> None:
    check_retention(MIN_RETENTION, "--older-than")
    for seconds in (MIN_RETENTION - 0.001, 0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ConfigError, match="24 hours") as info:
            check_retention(seconds, "--older-than")
        assert info.value.key == "--older-than"


def test_per_agent_retention_under_a_day_refused(fake_home: FakeHome) -> None:
    exc = refused(fake_home, '[agents.codex]\nretention = "23h"\n')
    assert exc.key == "agents.codex.retention" and "24 hours" in str(exc)


# -- per-agent retention -------------------------------------------------------


def test_per_agent_retention_without_a_global_one(fake_home: FakeHome) -> None:
    config = load(fake_home, '[agents.codex]\nretention = "90d"\n')
    assert config.retention is None
    assert config.has_retention()
    assert config.retention_for("codex") == 90 * 86400
    assert config.retention_for("claude") is None


def test_per_agent_retention_overrides_the_global_one(fake_home: FakeHome) -> None:
    config = load(fake_home, 'retention = "30d"\n[agents.codex]\nretention = "7d"\n')
    assert config.retention_for("codex") == 7 * 86400
    assert config.retention_for("claude") == 30 * 86400
    assert config.retention_for("a-store") == 30 * 86400


def test_agent_table_without_retention_overrides_nothing(fake_home: FakeHome) -> None:
    config = load(fake_home, 'retention = "30d"\n[agents.codex]\n')
    assert config.retention_for("codex") == 30 * 86400 and config.agent_retention == {}


def test_agents_section_for_unknown_agent_refused(fake_home: FakeHome) -> None:
    exc = refused(fake_home, '[agents.kodex]\nretention = "30d"\n')
    assert exc.key == "agents.kodex" and "unknown agent" in str(exc)


def test_agents_not_a_table_refused(fake_home: FakeHome) -> None:
    assert refused(fake_home, 'agents = "codex"\n').key == "agents"
    assert refused(fake_home, "agents.codex = 3\n").key == "agents.codex"


# -- unknown keys --------------------------------------------------------------


def test_unknown_top_level_key_refused(fake_home: FakeHome) -> None:
    exc = refused(fake_home, 'retension = "30d"\n')
    assert str(exc) == f"{fake_home.config_path}: retension = '30d': " + (
        "unknown key (known: retention, prune_interval, max_removals, trash, enabled, "
        "keep_last, max_size, agents, stores)"
    )


def test_unknown_top_level_table_refused(fake_home: FakeHome) -> None:
    assert refused(fake_home, '[agent.codex]\nretention = "30d"\n').key == "agent"


def test_unknown_agent_key_refused(fake_home: FakeHome) -> None:
    exc = refused(fake_home, '[agents.codex]\nretension = "90d"\n')
    assert exc.key == "agents.codex.retension"
    assert "agents.codex.retension = '90d': unknown key" in str(exc)


def test_unknown_store_key_refused(fake_home: FakeHome) -> None:
    text = store("s", fake_home.home / "s") + 'nmae = "x"\n'
    assert refused(fake_home, text).key == "stores[0].nmae"


# -- enabled and max_removals --------------------------------------------------


def test_enabled_subset(fake_home: FakeHome) -> None:
    assert load(fake_home, 'enabled = ["codex", "claude"]\n').enabled == ("codex", "claude")


def test_enabled_empty_and_duplicates(fake_home: FakeHome) -> None:
    assert load(fake_home, "enabled = []\n").enabled == ()
    assert load(fake_home, 'enabled = ["zero", "zero"]\n').enabled == ("zero",)


def test_enabled_unknown_agent_named(fake_home: FakeHome) -> None:
    exc = refused(fake_home, 'enabled = ["claude", "cursor"]\n')
    assert exc.key == "enabled" and "'cursor'" in str(exc)


def test_enabled_not_a_list_of_names(fake_home: FakeHome) -> None:
    assert refused(fake_home, 'enabled = "claude"\n').key == "enabled"
    assert refused(fake_home, "enabled = [1]\n").key == "enabled"


def test_max_removals_read(fake_home: FakeHome) -> None:
    assert load(fake_home, "max_removals = 1\n").max_removals == 1


@pytest.mark.parametrize("value", ["true", "false", "0", "-1", "1.0", '"200"', "[200]"])
def test_max_removals_bad_values_refused(fake_home: FakeHome, value: str) -> None:
    exc = refused(fake_home, f"max_removals = {value}\n")
    assert exc.key == "max_removals" and "max_removals = " in str(exc)


def test_max_removals_bool_is_not_a_count(fake_home: FakeHome) -> None:
    assert refused(fake_home, "max_removals = true\n").value is True


# -- stores: shape -------------------------------------------------------------


def test_store_loads(fake_home: FakeHome) -> None:
    root = fake_home.root / "issues"
    config = load(fake_home, store("issues.v2_x-1", root, 3))
    assert config.stores == (StoreConfig("issues.v2_x-1", root, 3),)
    assert config.enabled == AGENTS


def test_tilde_expands_to_the_given_home(fake_home: FakeHome) -> None:
    other = fake_home.root / "other-home"
    config = load(fake_home, store("a", "~/stores/a"), home=other)
    assert config.stores[0].root == other / "stores" / "a"


def test_tilde_alone_is_the_given_home(fake_home: FakeHome) -> None:
    other = fake_home.root / "other-home"
    with pytest.raises(ConfigError, match=re.escape(f"$HOME ({other})")):
        load(fake_home, store("a", "~"), home=other)


def test_tilde_user_and_relative_roots_refused(fake_home: FakeHome) -> None:
    for root in ("~bob/stores", "stores/a", "./a", ""):
        exc = refused(fake_home, store("s", root))
        assert exc.key == "stores[0].root" and exc.value == root


@pytest.mark.parametrize("field", ["name", "root", "depth"])
def test_store_field_missing_refused(fake_home: FakeHome, field: str) -> None:
    lines = store("s", fake_home.root / "s").splitlines(keepends=True)
    text = "".join(line for line in lines if not line.startswith(field))
    exc = refused(fake_home, text)
    assert exc.key == f"stores[0].{field}" and "missing" in str(exc)


@pytest.mark.parametrize("depth", ["0", "-1", "true", "1.0", '"2"'])
def test_store_depth_bad_values_refused(fake_home: FakeHome, depth: str) -> None:
    text = f'[[stores]]\nname = "s"\nroot = "{fake_home.root / "s"}"\ndepth = {depth}\n'
    assert refused(fake_home, text).key == "stores[0].depth"


@pytest.mark.parametrize("name", ["", "-x", ".hidden", "_x", "a/b", "a b", "é", "x" * 65, "..", 3])
def test_store_name_bad_values_refused(fake_home: FakeHome, name: object) -> None:
    shown = f'"{name}"' if isinstance(name, str) else str(name)
    text = f'[[stores]]\nname = {shown}\nroot = "{fake_home.root / "s"}"\ndepth = 1\n'
    exc = refused(fake_home, text)
    assert exc.key == "stores[0].name" and exc.value == name


def test_store_named_like_a_builtin_agent_refused(fake_home: FakeHome) -> None:
    exc = refused(fake_home, store("codex", fake_home.root / "s"))
    assert exc.key == "stores[0].name" and "built-in" in str(exc)


def test_store_names_unique(fake_home: FakeHome) -> None:
    text = store("s", fake_home.root / "s1") + store("s", fake_home.root / "s2")
    exc = refused(fake_home, text)
    assert exc.key == "stores[1].name" and "already" in str(exc)


def test_stores_must_be_an_array_of_tables(fake_home: FakeHome) -> None:
    assert refused(fake_home, 'stores = "x"\n').key == "stores"
    text = f'[stores]\nname = "s"\nroot = "{fake_home.root / "s"}"\ndepth = 1\n'
    assert refused(fake_home, text).key == "stores"


# -- stores: where the root may be ---------------------------------------------


def test_store_root_home_refused(fake_home: FakeHome) -> None:
    for root in ("~", str(fake_home.home), f"{fake_home.home}/"):
        exc = refused(fake_home, store("s", root))
        assert exc.key == "stores[0].root" and "$HOME" in str(exc)


def test_store_root_containing_home_refused(fake_home: FakeHome) -> None:
    for root in ("/", fake_home.root):
        assert "$HOME" in str(refused(fake_home, store("s", root)))


def test_store_root_containing_claude_root_refused(fake_home: FakeHome) -> None:
    # fake_home's TMPDIR holds claude's per-uid tmp root (not inside $HOME).
    exc = refused(fake_home, store("s", fake_home.root / "tmp"))
    assert "claude's root" in str(exc)


def test_store_root_equal_to_an_agent_root_refused(fake_home: FakeHome) -> None:
    exc = refused(fake_home, store("s", "~/.claude"))
    assert exc.value == "~/.claude" and "claude's root" in str(exc)


def test_store_root_inside_an_agent_root_allowed(fake_home: FakeHome) -> None:
    # The contract's own example store lies inside ~/.codex; only "contains" is refused.
    config = load(fake_home, store("s", "~/.codex/session-stores/default", 2))
    assert config.stores[0].root == fake_home.codex / "session-stores" / "default"


def test_store_root_dotdot_is_normalised_before_checking(fake_home: FakeHome) -> None:
    assert "claude's root" in str(refused(fake_home, store("s", "~/x/../.claude")))


def test_store_root_double_slash_cannot_slip_past(fake_home: FakeHome) -> None:
    assert "claude's root" in str(refused(fake_home, store("s", f"/{fake_home.claude}")))


def test_store_root_is_kept_normalised(fake_home: FakeHome) -> None:
    config = load(fake_home, store("s", f"/{fake_home.root}/x/../s/"))
    assert str(config.stores[0].root) == str(fake_home.root / "s")


def test_store_root_link_to_an_agent_root_refused(fake_home: FakeHome) -> None:
    fake_home.claude.mkdir()
    link = fake_home.root / "linked"
    link.symlink_to(fake_home.home)
    exc = refused(fake_home, store("s", link))
    assert "$HOME" in str(exc)


def test_store_root_inside_state_dir_refused(fake_home: FakeHome) -> None:
    exc = refused(fake_home, store("s", fake_home.state / "stores"))
    assert "state dir" in str(exc)


def test_store_root_containing_state_dir_refused(fake_home: FakeHome) -> None:
    exc = refused(fake_home, store("s", "~/.local/state"))
    assert "state dir" in str(exc)


def test_store_roots_equal_refused(fake_home: FakeHome) -> None:
    text = store("a", fake_home.root / "s") + store("b", fake_home.root / "s")
    exc = refused(fake_home, text)
    assert exc.key == "stores[1].root" and "overlaps store 'a'" in str(exc)


@pytest.mark.parametrize("order", [("s", "s/inner"), ("s/inner", "s")])
def test_store_roots_nested_refused(fake_home: FakeHome, order: tuple[str, str]) -> None:
    first, second = (fake_home.root / p for p in order)
    exc = refused(fake_home, store("a", first) + store("b", second))
    assert "overlaps store 'a'" in str(exc)


def test_sibling_with_shared_prefix_does_not_overlap(fake_home: FakeHome) -> None:
    b, bc = fake_home.root / "a" / "b", fake_home.root / "a" / "bc"
    config = load(fake_home, store("b", b) + store("bc", bc))
    assert [s.root for s in config.stores] == [b, bc]


def test_prefix_sibling_of_an_agent_root_allowed(fake_home: FakeHome) -> None:
    config = load(fake_home, store("s", "~/.claude-stores"))
    assert config.stores[0].root == fake_home.home / ".claude-stores"


# -- keep_last and max_size ------------------------------------------------------


def test_keep_last_and_max_size_global_and_per_agent(fake_home: FakeHome) -> None:
    fake_home.write_config(
        'keep_last = 3\nmax_size = "20G"\n'
        '[agents.codex]\nkeep_last = 5\nmax_size = "500M"\n'
        '[agents.claude]\nretention = "30d"\n'
    )
    config = load(fake_home)
    assert (config.keep_last_for("claude"), config.keep_last_for("codex")) == (3, 5)
    assert config.max_size_for("claude") == (20 << 30, "*")
    assert config.max_size_for("codex") == (500 << 20, "codex")
    assert config.has_retention()


def test_a_size_cap_alone_lets_a_prune_remove(fake_home: FakeHome) -> None:
    fake_home.write_config('max_size = "1T"\n')
    config = load(fake_home)
    assert config.retention_for("claude") is None and config.has_retention()


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("max_size = 20", "max_size"),
        ('max_size = "20"', "max_size"),
        ('max_size = "20g"', "max_size"),
        ('max_size = "0G"', "max_size"),
        ('max_size = "1.5G"', "max_size"),
        ('max_size = "-1G"', "max_size"),
        ("keep_last = -1", "keep_last"),
        ('keep_last = "3"', "keep_last"),
        ("keep_last = true", "keep_last"),
        ("keep_last = 2.0", "keep_last"),
        ('[agents.codex]\nmax_size = "big"', "agents.codex.max_size"),
        ("[agents.codex]\nkeep_last = -2", "agents.codex.keep_last"),
    ],
)
def test_a_bad_size_or_count_is_refused_naming_the_key(
    fake_home: FakeHome, line: str, key: str
) -> None:
    assert refused(fake_home, line + "\n").key == key
