"""Install the pinned agents from npm into a cache folder of the checkout.

    python tests/real_agents/install.py [AGENT ...]

Each agent goes to `<cache>/<package>@<version>/` (the cache is
`$AGENTKEEP_AGENT_CACHE`, else `.cache/agents` in the checkout), with npm's
own cache beside it, so nothing is written to the real home. An agent
already installed at its pinned version is left alone. Exit 0 when every
agent asked for is installed; exit 3, saying so loudly, when the npm
registry cannot be reached (the suite then skips, naming this); 1 when an
install failed for another reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from pins import PINS, Pin

CHECKOUT = Path(__file__).resolve().parents[2]
REGISTRY = "https://registry.npmjs.org/"
UNREACHABLE = 3


def cache_dir() -> Path:
    explicit = os.environ.get("AGENTKEEP_AGENT_CACHE")
    return Path(explicit) if explicit else CHECKOUT / ".cache" / "agents"


def prefix(pin: Pin) -> Path:
    return cache_dir() / pin.spec.replace("/", "+")


def binary(pin: Pin) -> Path:
    return prefix(pin) / "node_modules" / ".bin" / pin.command


def installed(pin: Pin) -> bool:
    done = prefix(pin) / ".installed"
    return binary(pin).exists() and done.exists() and done.read_text().strip() == pin.spec


def registry_reachable(timeout: float = 15.0) -> bool:
    try:
        with urllib.request.urlopen(REGISTRY, timeout=timeout) as answer:
            return bool(answer.status < 500)
    except OSError:
        return False


def install(pin: Pin) -> None:
    where = prefix(pin)
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    env = dict(os.environ)
    env.update(
        npm_config_cache=str(cache_dir() / "npm-cache"),
        npm_config_update_notifier="false",
        npm_config_fund="false",
        npm_config_audit="false",
    )
    subprocess.run(
        ["npm", "install", "--no-save", "--prefix", str(where), pin.spec],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (where / ".installed").write_text(pin.spec + "\n")


def main(argv: list[str]) -> int:
    wanted = [PINS[a] for a in argv] if argv else list(PINS.values())
    missing = [pin for pin in wanted if not installed(pin)]
    if not missing:
        print("real agents: all installed:", ", ".join(p.spec for p in wanted))
        return 0
    if shutil.which("npm") is None or not registry_reachable():
        print(
            "!!! real agents: the npm registry cannot be reached (or npm is missing): "
            "the conformance suite against the real agents is SKIPPED !!!",
            file=sys.stderr,
        )
        return UNREACHABLE
    for pin in missing:
        print(f"real agents: installing {pin.spec}", flush=True)
        try:
            install(pin)
        except subprocess.CalledProcessError as exc:
            print(f"real agents: installing {pin.spec} failed: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
