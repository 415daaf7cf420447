"""Check events: a result on one of Baton's branches settles the run that pushed it.

A re-run of Baton's own check run, or of all its suite's checks, is a retry, asked from the
pull request's page.
"""

from __future__ import annotations

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.domain.commands import ignored_bot
from bot.domain.jobs import rerun_job, settle_head_job
from bot.edges.git import BRANCH_PREFIX
from bot.web.delivery import HandlerContext

router = Router()


def _settle(event: Event, ctx: HandlerContext, head_sha: str, branches: list[str]) -> None:
    # GitHub names no branch of the repository for a head in a fork: in fork mode, that
    # may be Baton's, and the job finds out by its sha.
    in_fork = ctx.settings.fork_owner is not None and not any(branches)
    if not in_fork and not any(branch.startswith(BRANCH_PREFIX) for branch in branches):
        return  # not Baton's branch: nothing to settle
    installation_id = ctx.installation_id(event)
    if installation_id is not None:
        repo = event.data["repository"]["full_name"]
        ctx.enqueue(settle_head_job(installation_id, repo, head_sha))


@router.register("check_suite", action="completed")
async def check_suite_completed(event: Event, ctx: HandlerContext) -> None:
    """Settle on a completed suite; the job reads every suite of the head, not just this one."""
    suite = event.data["check_suite"]
    _settle(event, ctx, suite["head_sha"], [str(suite.get("head_branch") or "")])


@router.register("check_run", action="completed")
async def check_run_completed(event: Event, ctx: HandlerContext) -> None:
    """Settle on a completed check run (apps that report runs without completing suites)."""
    check_run = event.data["check_run"]
    branch = str((check_run.get("check_suite") or {}).get("head_branch") or "")
    _settle(event, ctx, check_run["head_sha"], [branch])


def _rerun(event: Event, ctx: HandlerContext, head_sha: str) -> None:
    login, kind = event.data["sender"]["login"], event.data["sender"]["type"]
    installation_id = ctx.installation_id(event)
    if installation_id is None or ignored_bot(login, kind, ctx.settings.trusted_bots):
        return
    repo = event.data["repository"]["full_name"]
    ctx.enqueue(rerun_job(installation_id, repo, head_sha, login, kind, event.delivery_id))


@router.register("check_run", action="rerequested")
async def check_run_rerequested(event: Event, ctx: HandlerContext) -> None:
    """Take "Re-run" on Baton's own check run (GitHub sends it no other's) as `/baton retry`."""
    _rerun(event, ctx, event.data["check_run"]["head_sha"])


@router.register("check_suite", action="rerequested")
async def check_suite_rerequested(event: Event, ctx: HandlerContext) -> None:
    """Take "Re-run all checks" of Baton's own suite (GitHub sends it no other's) likewise.

    The job finds the issue whose run pushed the head; a head Baton did not push retries
    nothing.
    """
    _rerun(event, ctx, event.data["check_suite"]["head_sha"])


@router.register("status")
async def commit_status(event: Event, ctx: HandlerContext) -> None:
    """Settle on a final commit status (CI that reports statuses rather than checks)."""
    if event.data["state"] == "pending":
        return
    branches = [str(branch["name"]) for branch in event.data.get("branches", [])]
    _settle(event, ctx, event.data["sha"], branches)
