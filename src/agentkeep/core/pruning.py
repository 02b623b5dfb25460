"""Running a prune (scheduled or a person's) and purge: each takes the prune
lock, lets the Pruner plan and act, and records what it did for `status`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

from agentkeep import preview
from agentkeep.adapters.base import Adapter, load
from agentkeep.core.context import Context, parse_age
from agentkeep.core.ending import ends_as
from agentkeep.core.reclaim import SUGGESTED_RETENTION
from agentkeep.errors import BadParams, NotFound, Refused
from agentkeep.progress import Progress
from agentkeep.prune.lock import PrunerLock
from agentkeep.prune.pause import lift_pause, record_last_prune
from agentkeep.prune.plan import descendants
from agentkeep.prune.report import PruneOptions, PruneRefused, PruneReport
from agentkeep.prune.run import Pruner
from agentkeep.statefiles import clear_stale, read_json
from agentkeep.trash.entries import TrashError

log = structlog.get_logger("agentkeep.core")


def prune(
    ctx: Context,
    *,
    dry_run: bool = False,
    older_than: str | None = None,
    agent: str | None = None,
    scheduled: bool = False,
    progress: Progress | None = None,
) -> PruneReport | None:
    """Remove sessions idle past the cutoff. A scheduled prune re-reads the
    config, skips its turn when another prune runs, and honours the pause;
    any other that is not a dry run waits its turn and lifts the pause."""
    if scheduled:
        ctx.reload()
        if not ctx.prunes_on_schedule():
            return None
    config = ctx.require_config()
    if agent is not None:
        ctx.adapter(agent)
    now = time.time()
    override = parse_age(older_than, "--older-than") if older_than is not None else None
    cutoffs = ctx.cutoffs(override, agent, now)
    if not cutoffs:
        raise BadParams(
            "prune needs a cutoff: pass --older-than AGE or set a retention in "
            f'{ctx.env.config_path} (for example: retention = "{SUGGESTED_RETENTION}")'
        )
    wanted = preview.retentions(config, ctx.adapters)
    waits = preview.due(ctx.state_dir, wanted, now, config.prune_interval) if scheduled else None
    opts = PruneOptions(
        cutoffs=cutoffs,
        now=now,
        dry_run=dry_run or waits is not None,
        max_removals=config.max_removals,
        trash_for=config.trash,
        scheduled=scheduled,
        progress=progress,
        shapes=ctx.shapes(override),
    )
    report = _run_locked(ctx, opts, wait=not scheduled, preview=waits)
    if report is None:
        return None
    if not report.paused and not opts.dry_run and (scheduled or agent is None):
        _save(preview.confirmed, ctx.state_dir, wanted)
    elif waits is not None and not report.paused:
        log.warning("a new retention: previewed, nothing removed", why=waits)
        _save(preview.previewed, ctx.state_dir, wanted, now)
    return report


def _save(write: Callable[..., None], *args: Any) -> None:
    """A state write whose failure costs a record, not the run."""
    try:
        write(*args)
    except OSError as exc:
        log.error("state not saved", error=exc.strerror or str(exc))


def _run_locked(
    ctx: Context, opts: PruneOptions, *, wait: bool, preview: str | None = None
) -> PruneReport | None:
    lock = PrunerLock(ctx.state_dir)
    # acquire() raises Failed when the lock cannot be taken at all.
    if not lock.acquire(wait=wait):
        log.info("a prune is already running; this turn is skipped")
        return None
    try:
        if not opts.dry_run:
            # What a writer killed half way left (its temporary file).
            clear_stale(ctx.state_dir)
        try:
            pruner = Pruner(
                ctx.adapters,
                ctx.state_dir,
                index=ctx.index,
                pins=ctx.pins(),
                expiry=ctx.trash_expiry,
                env=ctx.env,
            )
            report = pruner.run(opts)
        except PruneRefused as exc:
            raise ends_as(exc) from None
        except TrashError as exc:
            raise ends_as(exc, f"prune refused: {exc}") from None
        summary = None
        if report.paused:
            summary = report.summary(opts.now, opts.scheduled) | _last_ts(ctx)
        elif preview is not None:
            # What a new retention would remove, for status to show.
            summary = report.summary(opts.now, opts.scheduled) | {"preview": preview}
        elif not opts.dry_run:
            summary = report.summary(opts.now, opts.scheduled)
        # A record that cannot be written is one error line, never the report's loss.
        try:
            if summary is not None and not opts.dry_run and not opts.scheduled:
                lift_pause(ctx.state_dir, opts.now)
            if summary is not None:
                record_last_prune(ctx.state_dir, summary)
                ctx.unsaved_prune = None
        except OSError as exc:
            log.error("the prune's record was not saved", error=exc.strerror or str(exc))
            ctx.unsaved_prune = summary
        return report
    finally:
        lock.release()


def _last_ts(ctx: Context) -> dict[str, Any]:
    """A paused run does not move the recorded time of the last real prune."""
    last = read_json(ctx.state_dir / "last_prune.json", {}) or {}
    return {k: last[k] for k in ("ts", "time") if k in last}


def purge(
    ctx: Context, *, agent: str, id: str, dry_run: bool = False, cascade: bool = False
) -> PruneReport:
    """Remove one named session now, whatever its age: refused (exit 4) when it
    stays; --cascade takes the descendants first under the same rules."""
    ctx.require_config()
    sid = ctx.session_id(agent, id)
    adapter = ctx.adapter(agent)
    if load(adapter, sid) is None:
        raise NotFound(f"no such session: {agent} {sid}")
    targets = [(agent, sid)]
    if cascade:
        targets += [(agent, c) for c in _cascade(adapter, sid)]
    opts = PruneOptions(
        cutoffs={agent: None},
        now=time.time(),
        dry_run=dry_run,
        trash_for=ctx.config.trash,
        purge=targets,
    )
    report = _run_locked(ctx, opts, wait=True)
    assert report is not None
    for k in report.kept:
        if (k.agent, k.id) == (agent, sid):
            why = f"{k.reason.value}: {k.detail}" if k.detail else k.reason.value
            raise Refused(f"refused: {agent} {sid} stays ({why})", report=report.to_json())
    return report


def _cascade(adapter: Adapter, sid: str) -> list[str]:
    """The descendants as the disk lists them now (the plan orders them)."""
    children: dict[str, list[str]] = {}
    for s in adapter.sessions():
        if s.parent:
            children.setdefault(s.parent, []).append(s.id)
    return descendants(sid, lambda parent: children.get(parent, ()))
