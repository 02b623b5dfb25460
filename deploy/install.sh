#!/bin/sh
# Install agentkeep for this user from this source tree, isolated in its own
# virtual environment, and start the service. Safe to re-run: the venv is
# reused (and upgraded in place), the command link is replaced only when it
# is a link, and `agentkeep service install` is itself idempotent (it
# restarts a running service, so the upgraded code runs).
#
#   deploy/install.sh [--no-service] [--run] [--dry-run]
#   deploy/install.sh --uninstall [--purge] [--dry-run]
#
#   --no-service  install the command only; do not install or start the service
#   --run         then run the main job: scan and list this user's agent
#                 sessions, or, when no agent home exists, a demo home
#   --uninstall   stop and remove the service, the venv, the command link and
#                 the demo home: all this script installed (it installs no
#                 shell completions and no man page). Then say what is left,
#                 agentkeep's state dir (the index, pins and the trash) and
#                 its config, and offer to remove them too (on a terminal)
#   --purge       with --uninstall: remove the state dir and the config too,
#                 without asking. Without --purge or a "y" nothing of them goes
#   --dry-run     print what would be done, do nothing
#
# Environment:
#   AGENTKEEP_HOME     the venv (default ~/.local/share/agentkeep/venv)
#   AGENTKEEP_BIN_DIR  where the `agentkeep` link goes (default ~/.local/bin)
#   PYTHON             the interpreter to build the venv with (default: the
#                      first of python3.13 python3.12 python3.11 python3 that
#                      is 3.11 or newer)
#
# A plain venv is the one path here because it needs nothing but Python;
# `pipx install .` or `uv tool install .` from the source tree work as well,
# followed by `agentkeep service install`.
set -eu

usage() {
    sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

no_service=0
run_job=0
dry_run=0
uninstall=0
purge=0
for arg in "$@"; do
    case $arg in
        --no-service) no_service=1 ;;
        --run) run_job=1 ;;
        --dry-run) dry_run=1 ;;
        --uninstall) uninstall=1 ;;
        --purge) purge=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "install.sh: unknown option: $arg" >&2; usage >&2; exit 2 ;;
    esac
done
if [ "$purge" -eq 1 ] && [ "$uninstall" -eq 0 ]; then
    echo "install.sh: --purge goes with --uninstall" >&2; exit 2
fi
if [ "$uninstall" -eq 1 ] && [ $((no_service + run_job)) -gt 0 ]; then
    echo "install.sh: --uninstall takes only --purge and --dry-run" >&2; exit 2
fi

say() { printf '%s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

# Print a command; run it unless this is a dry run.
run() {
    if [ "$dry_run" -eq 1 ]; then
        say "would run: $*"
    else
        "$@"
    fi
}

: "${HOME:?HOME is not set}"
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${AGENTKEEP_HOME:-$HOME/.local/share/agentkeep/venv}
bin_dir=${AGENTKEEP_BIN_DIR:-$HOME/.local/bin}
link=$bin_dir/agentkeep

[ -f "$repo/pyproject.toml" ] || die "$repo does not look like the agentkeep source tree"
demo=$HOME/.local/share/agentkeep/demo

# --uninstall: take back what the steps below put in place. What agentkeep
# itself keeps (the state dir, the config) is the user's: it goes only with
# --purge or a "y" on a terminal, never by default.
if [ "$uninstall" -eq 1 ]; then
    agentkeep=$venv/bin/agentkeep
    working=0
    "$venv/bin/python" -c 'import agentkeep.cli' 2>/dev/null && working=1

    # Ask the installation where its files are (the rules are in
    # agentkeep.paths); a venv that no longer runs leaves the documented defaults.
    paths='from agentkeep.paths import Env; e = Env.from_environ(); print(e.state_dir); print(e.config_path)'
    if [ "$working" -eq 1 ] && found=$("$venv/bin/python" -c "$paths"); then
        state_dir=$(printf '%s\n' "$found" | sed -n 1p)
        config=$(printf '%s\n' "$found" | sed -n 2p)
    else
        state_dir=${XDG_STATE_HOME:-$HOME/.local/state}/agentkeep
        config=${AGENTKEEP_CONFIG:-${XDG_CONFIG_HOME:-$HOME/.config}/agentkeep/config.toml}
    fi
    # The pid of a daemon answering on the socket (asked without opening the index).
    answering='from agentkeep.paths import Env; from agentkeep.service import answering_daemon; print(answering_daemon(Env.from_environ()) or "")'
    trash_count=
    if [ "$working" -eq 1 ]; then
        trash_count=$("$agentkeep" trash --json 2>/dev/null |
            "$venv/bin/python" -c 'import json, sys; print(len(json.load(sys.stdin)["entries"]))' \
            2>/dev/null) || trash_count=
    fi

    # 1. The service: `agentkeep service uninstall` stops it and removes its
    # files (the files alone where no service manager answers). Nothing else
    # goes until it is gone: the venv is what a retry needs.
    if [ "$working" -eq 1 ]; then
        run "$agentkeep" service uninstall ||
            die "the service could not be removed (see above); nothing else was removed. Fix it, then re-run $0 --uninstall"
    else
        for f in "${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user/agentkeep.service" \
            "$HOME/Library/LaunchAgents/dev.agentkeep.daemon.plist"; do
            [ -f "$f" ] &&
                die "$venv no longer runs, so it cannot remove the service it installed: stop the service and remove $f yourself, then re-run $0 --uninstall"
        done
    fi

    # A daemon started by hand still holds the state dir: it is never purged under it.
    daemon_pid=
    if [ "$working" -eq 1 ] && [ "$dry_run" -eq 0 ]; then
        daemon_pid=$("$venv/bin/python" -c "$answering" 2>/dev/null) || daemon_pid=
    fi
    if [ -n "$daemon_pid" ]; then
        say "note: an agentkeep daemon not run by the service still runs (pid $daemon_pid); stop it: kill $daemon_pid"
    fi

    # 2. The command link (only a link to this venv), the venv (only a venv), the demo home.
    if [ -L "$link" ] && [ "$(readlink "$link")" = "$venv/bin/agentkeep" ]; then
        run rm -f "$link"
    fi
    if [ -f "$venv/pyvenv.cfg" ]; then
        run rm -rf "$venv"
    elif [ -e "$venv" ]; then
        say "note: $venv is not a virtual environment; left alone"
    fi
    if [ -f "$demo/.agentkeep-demo" ]; then
        run rm -rf "$demo"
    fi
    for d in "$(dirname "$venv")" "$(dirname "$demo")"; do
        if [ "$dry_run" -eq 0 ] && [ -d "$d" ]; then rmdir "$d" 2>/dev/null || true; fi
    done

    # 3. What agentkeep keeps: said, and removed only when asked.
    logs=$HOME/Library/Logs/agentkeep
    [ -d "$state_dir" ] || state_dir=
    [ -f "$config" ] || config=
    [ -d "$logs" ] || logs=
    if [ -z "$state_dir$config$logs" ]; then
        say "agentkeep is uninstalled; it left nothing behind"
        exit 0
    fi
    say "agentkeep is uninstalled. Left in place:"
    if [ -n "$state_dir" ]; then
        case $trash_count in
            '' | 0) held= ;;
            1) held=" (1 pruned session in the trash)" ;;
            *) held=" ($trash_count pruned sessions in the trash)" ;;
        esac
        say "  $state_dir: the index, pins and the trash$held"
    fi
    [ -z "$config" ] || say "  $config: the config"
    [ -z "$logs" ] || say "  $logs: the service's logs"
    if [ "$purge" -eq 0 ] && [ "$dry_run" -eq 0 ] && [ -t 0 ] && [ -t 1 ]; then
        printf 'Remove them too? What is in the trash cannot be restored after this. [y/N] '
        read -r answer || answer=
        case $answer in [yY] | [yY][eE][sS]) purge=1 ;; esac
    fi
    if [ "$purge" -eq 0 ]; then
        say "to remove them too: $0 --uninstall --purge"
        exit 0
    fi
    if [ -n "$daemon_pid" ] && [ -n "$state_dir" ]; then
        die "not removing $state_dir while pid $daemon_pid uses it; stop it, then run: $0 --uninstall --purge"
    fi
    [ -z "$state_dir" ] || run rm -rf "$state_dir"
    [ -z "$logs" ] || run rm -rf "$logs"
    if [ -n "$config" ]; then
        run rm -f "$config"
        # Its folder too when it is agentkeep's own and now empty.
        config_dir=$(dirname "$config")
        if [ "$dry_run" -eq 0 ] && [ "${config_dir##*/}" = agentkeep ]; then
            rmdir "$config_dir" 2>/dev/null || true
        fi
    fi
    exit 0
fi

# Checked before anything is done: only a link (ours, or a dangling one) is replaced.
if [ -e "$link" ] && [ ! -L "$link" ]; then
    die "$link exists and is not a link; remove it, or set AGENTKEEP_BIN_DIR"
fi

python_ok() {
    "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

find_python() {
    if [ -n "${PYTHON:-}" ]; then
        python_ok "$PYTHON" || die "PYTHON=$PYTHON is not Python 3.11 or newer"
        say "$PYTHON"
        return
    fi
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
            command -v "$candidate"
            return
        fi
    done
    die "no Python 3.11 or newer found (set PYTHON=/path/to/python3.11)"
}

# 1. The venv: reuse one that works; never touch a directory that is not a venv.
if [ -x "$venv/bin/python" ] && python_ok "$venv/bin/python"; then
    say "reusing $venv"
elif [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
    die "$venv exists and is not a virtual environment; move it away or set AGENTKEEP_HOME"
else
    python=$(find_python)
    # --clear rebuilds a broken venv (its interpreter gone after an upgrade).
    run "$python" -m venv --clear "$venv" ||
        die "could not create $venv (on Debian/Ubuntu: apt install python3-venv)"
fi

# 2. The package, from this source tree (an upgrade when it is already there),
# with the `ui` extra (Textual) for `agentkeep ui`.
run "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "$repo[ui]"

# 3. The command on PATH: a link to the venv's script.
run mkdir -p "$bin_dir"
run ln -sfn "$venv/bin/agentkeep" "$link"
case ":${PATH:-}:" in
    *":$bin_dir:"*) ;;
    *) say "note: $bin_dir is not on your PATH; add it, or run $link" ;;
esac

# 4. The service (itself idempotent; it says when lingering is needed). A
# machine without a user service manager (a container) still gets the
# command; `service install` says why, once, and writes nothing.
without=
if [ "$no_service" -eq 0 ]; then
    run "$venv/bin/agentkeep" service install || without=" (without the service)"
fi
say "agentkeep is installed: $link$without"

# 5. The main job, on this user's real agent homes, or a demo home without any.
has_agent_home() {
    for d in "${CLAUDE_CONFIG_DIR:-$HOME/.claude}" "${CODEX_HOME:-$HOME/.codex}" \
        "${XDG_DATA_HOME:-$HOME/.local/share}/opencode" "${GEMINI_CLI_HOME:-$HOME}/.gemini" \
        "$HOME/.grok" "${XDG_DATA_HOME:-$HOME/.local/share}/zero/sessions"; do
        [ -d "$d" ] && return 0
    done
    return 1
}
if [ "$run_job" -eq 1 ]; then
    if has_agent_home; then
        run "$venv/bin/agentkeep" scan
        run "$venv/bin/agentkeep" ls
    else
        say "no agent home found in $HOME; showing a demo home instead"
        AGENTKEEP="$venv/bin/agentkeep"
        export AGENTKEEP
        run "$venv/bin/python" "$repo/deploy/demo.py" \
            "$HOME/.local/share/agentkeep/demo"
    fi
fi
