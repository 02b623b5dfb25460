"""Install the agents the conformance suite runs, from npm, into a cache
folder of the checkout.

    python tests/real_agents/install.py [AGENT ...]

Which versions: the pins (pins.py); with `AGENTKEEP_AGENTS=newest`, each
agent's newest version on npm, resolved afresh (`npm view`). Each goes to
`<cache>/<package>@<version>/` (the cache is `$AGENTKEEP_AGENT_CACHE`, else
`.cache/agents` in the checkout), with npm's own cache beside it, so nothing
is written to the real home. An agent already installed at its version is
left alone.

npm runs with that folder as its working directory, holding a minimal
package.json (which makes it npm's local prefix), and never with `--prefix`:
a prefix given on the command line moves npm's global config to
`<prefix>/etc/npmrc`, hiding the machine's (its proxy, its CA file). The
machine's npmrc, the user's `~/.npmrc` and `npm_config_*` stay in force,
and the registry is asked through npm itself (`npm ping`), so what npm can
reach is what counts.

Exit 0 when every agent asked for is installed; 3, saying so loudly, when
npm cannot reach its registry (the suite then skips, naming this); 1 when an
install failed for another reason; 2 for a wrong agent or switch. A failure
is remembered (`<cache>/install-failed`, its reason) until an install
succeeds: the suite then skips at once instead of trying again.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pins import NEWEST, PINNED, PINS, SWITCH, Pin

CHECKOUT = Path(__file__).resolve().parents[2]
UNREACHABLE = 3
USAGE = 2
# `npm ping` and `npm view` answer in seconds; a registry that does not
# answer in this long is taken as unreachable rather than waited for.
ASK_TIMEOUT_S = 90


class InstallFailed(Exception):
    """The agents cannot be had; the message says why."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def cache_dir() -> Path:
    explicit = os.environ.get("AGENTKEEP_AGENT_CACHE")
    return Path(explicit) if explicit else CHECKOUT / ".cache" / "agents"


def failed_marker() -> Path:
    return cache_dir() / "install-failed"


def failure() -> str | None:
    """Why the last install failed, or None when it did not."""
    try:
        return failed_marker().read_text().strip() or "unknown"
    except FileNotFoundError:
        return None


def prefix(pin: Pin) -> Path:
    return cache_dir() / pin.spec.replace("/", "+")


def binary(pin: Pin) -> Path:
    return prefix(pin) / "node_modules" / ".bin" / pin.command


def installed(pin: Pin) -> bool:
    done = prefix(pin) / ".installed"
    return binary(pin).exists() and done.exists() and done.read_text().strip() == pin.spec


def mode() -> str:
    chosen = os.environ.get(SWITCH, PINNED) or PINNED
    if chosen not in (PINNED, NEWEST):
        raise InstallFailed(f"{SWITCH}={chosen!r}: say {PINNED!r} or {NEWEST!r}", USAGE)
    return chosen


def wanted(agents: list[str] | None = None) -> dict[str, Pin]:
    """The agents to run, by name: pinned, or the newest on npm (mode())."""
    names = agents or list(PINS)
    unknown = sorted(set(names) - set(PINS))
    if unknown:
        known = ", ".join(PINS)
        raise InstallFailed(f"no such agent: {', '.join(unknown)} (known: {known})", USAGE)
    if mode() == PINNED:
        return {name: PINS[name] for name in names}
    return {name: PINS[name].at(newest(PINS[name].package)) for name in names}


@functools.cache
def newest(package: str) -> str:
    """The version npm's registry tags latest for `package`."""
    answer = npm(["view", package, "version", "--json"], cache_dir(), ASK_TIMEOUT_S)
    try:
        version = json.loads(answer)
    except ValueError as exc:
        raise InstallFailed(f"npm view {package} version said {answer!r}") from exc
    if not isinstance(version, str) or not version:
        raise InstallFailed(f"npm view {package} version said {answer!r}")
    return version


def npm(args: list[str], cwd: Path, timeout: float | None = None) -> str:
    """Run npm in `cwd` (the user's and the machine's config in force, its
    cache in ours); its output, or InstallFailed saying what went wrong."""
    if shutil.which("npm") is None:
        raise InstallFailed("npm is not installed", UNREACHABLE)
    cwd.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        npm_config_cache=str(cache_dir() / "npm-cache"),
        npm_config_update_notifier="false",
        npm_config_fund="false",
        npm_config_audit="false",
    )
    try:
        done = subprocess.run(
            ["npm", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        said = f"npm {' '.join(args)}: no answer in {timeout:.0f} s"
        raise InstallFailed(said, UNREACHABLE) from exc
    if done.returncode != 0:
        said = _gist(done.stderr) or done.stdout.strip()[-600:]
        raise InstallFailed(f"npm {' '.join(args)} exited {done.returncode}: {said}")
    return done.stdout.strip()


def _gist(stderr: str) -> str:
    """npm's error lines (its code and message), without the stack."""
    errors = [
        line[len("npm error ") :] for line in stderr.splitlines() if line.startswith("npm error ")
    ]
    said = [x for x in errors if x and not x[0].isspace() and x[0] not in "{}"]
    return "; ".join(said[:4])[:600]


def reachable() -> None:
    """InstallFailed (UNREACHABLE) unless npm reaches its registry."""
    try:
        npm(["ping", "--fetch-retries=0"], cache_dir(), ASK_TIMEOUT_S)
    except InstallFailed as exc:
        raise InstallFailed(f"npm cannot reach its registry: {exc}", UNREACHABLE) from exc


def folder(pin: Pin) -> Path:
    """The pin's folder, emptied, as npm runs in it."""
    where = prefix(pin)
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    # npm's local prefix is the nearest folder up with a package.json: this one.
    (where / "package.json").write_text(json.dumps({"name": "agent", "private": True}) + "\n")
    return where


def install(pin: Pin) -> None:
    npm(["install", "--no-save", "--no-package-lock", pin.spec], folder(pin))
    if not binary(pin).exists():
        raise InstallFailed(f"{pin.spec} installed no {binary(pin)}")
    (prefix(pin) / ".installed").write_text(pin.spec + "\n")


def ensure(agents: list[str] | None = None) -> dict[str, Pin]:
    """The agents asked for, installed; InstallFailed when they cannot be."""
    # The registry is asked first when it is needed: npm's own retries on
    # a registry that does not answer take minutes.
    asked = mode() == NEWEST
    if asked:
        reachable()
    pins = wanted(agents)
    missing = [pin for pin in pins.values() if not installed(pin)]
    if missing and not asked:
        reachable()
    for pin in missing:
        print(f"real agents: installing {pin.spec}", flush=True)
        install(pin)
    return pins


def remember(exc: InstallFailed) -> None:
    """Say loudly that the agents cannot be had, and remember it (a wrong
    argument aside), so that the suite skips at once (conftest.py)."""
    if exc.code != USAGE:
        failed_marker().parent.mkdir(parents=True, exist_ok=True)
        failed_marker().write_text(f"{exc}\n")
    print(
        f"!!! real agents: {exc}: the conformance suite against the real agents is SKIPPED !!!",
        file=sys.stderr,
    )


def main(argv: list[str]) -> int:
    try:
        pins = ensure(argv)
    except InstallFailed as exc:
        remember(exc)
        return exc.code
    failed_marker().unlink(missing_ok=True)
    print(f"real agents ({mode()}): installed:", ", ".join(p.spec for p in pins.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
