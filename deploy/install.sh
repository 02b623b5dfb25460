#!/bin/sh
# Install agentkeep for this user from this source tree, isolated in its own
# virtual environment, and start the service. Safe to re-run: the venv is
# reused (and upgraded in place), the command link is replaced only when it
# is a link, and `agentkeep service install` is itself idempotent (it
# restarts a running service, so the upgraded code runs).
#
#   deploy/install.sh [--no-service] [--run] [--dry-run]
#
#   --no-service  install the command only; do not install or start the service
#   --run         then run the main job: scan and list this user's agent
#                 sessions, or, when no agent home exists, a demo home
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
for arg in "$@"; do
    case $arg in
        --no-service) no_service=1 ;;
        --run) run_job=1 ;;
        --dry-run) dry_run=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "install.sh: unknown option: $arg" >&2; usage >&2; exit 2 ;;
    esac
done

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

# 2. The package, from this source tree (an upgrade when it is already there).
run "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "$repo"

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
