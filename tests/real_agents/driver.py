"""What every agent's driver does alike: a workspace in the fake user's
home, a command run isolated against the mock model (isolation.run), a
headless prompt whose session id is read back, and terminals started and
ended (terminal.py).

An agent's driver (drive_<agent>.py) says only what is its own: its name
among the installed agents (`AGENT`), how it is set up (`setup`), the mock
protocol it speaks (`PROTOCOL`), the arguments of a headless prompt
(`prompt_args`), where the session's id is to be read (`session_id`) and,
where its terminal wants more than typing, a `TERMINAL` of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

import isolation
from terminal import Terminal

from fakehome import FakeHome

Rules = list[dict[str, Any]]


@dataclass
class Driver:
    AGENT: ClassVar[str]
    PROTOCOL: ClassVar[str]
    TERMINAL: ClassVar[type[Terminal]] = Terminal

    home: FakeHome
    binary: Path
    logs: Path
    runs: list[isolation.Run] = field(default_factory=list)
    terminals: list[Terminal] = field(default_factory=list)

    @classmethod
    def setup(cls, home: FakeHome, binary: Path) -> Self:
        """The driver of `binary` for `home`, the agent's config written and
        its environment set."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def command(self, *args: str) -> list[str]:
        """The agent's argv for `args`."""
        return [str(self.binary), *args]

    def workspace(self, *parts: str) -> Path:
        path = self.home.home.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def run(self, cwd: Path, *args: str, rules: Rules | None = None) -> isolation.Run:
        result = isolation.run(
            self.command(*args),
            env=self.home.environ,
            cwd=cwd,
            protocol=self.PROTOCOL,
            rules=rules or [],
            workdir=self.logs,
            timeout=240,
        )
        self.runs.append(result)
        return result

    def prompt(self, cwd: Path, text: str, *args: str, rules: Rules | None = None) -> isolation.Run:
        """One prompt, headless, whatever its exit."""
        return self.run(cwd, *self.prompt_args(text, *args), rules=rules)

    def session(self, cwd: Path, text: str, *args: str, rules: Rules | None = None) -> str:
        """Run one prompt headless and return the id of the session it used."""
        return self.session_id(self.prompt(cwd, text, *args, rules=rules).check())

    def prompt_args(self, text: str, *args: str) -> list[str]:
        raise NotImplementedError

    def session_id(self, result: isolation.Run) -> str:
        raise NotImplementedError

    def terminal(self, cwd: Path, *args: str, rules: Rules | None = None) -> Terminal:
        """The agent in a terminal of its own, ended by `close`."""
        terminal = self.TERMINAL.start(
            self.home,
            self.command(*args),
            cwd=cwd,
            protocol=self.PROTOCOL,
            rules=rules or [],
            workdir=self.logs,
        )
        self.terminals.append(terminal)
        return terminal

    def close(self) -> None:
        """End every terminal this driver started."""
        for terminal in self.terminals:
            terminal.kill()
