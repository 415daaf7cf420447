"""What Baton keeps of an issue between jobs: its labels, comments, check runs, stops, refusals."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime

import redis
from redis.exceptions import WatchError

from bot.domain.check_run import CheckRunRecord
from bot.domain.issue_text import IssueText
from bot.domain.model import IssueRef, Labels
from bot.edges.store import keys
from bot.edges.store.base import RUN_TTL_S, StoreBase, text

COMMENT_LOCK_TTL_MS = 15_000
COMMENT_LOCK_WAIT_S = 20.0
STATUS_TURNS_TTL_S = 24 * 3600
STOP_TTL_S = 3600


class IssueStateStore(StoreBase):
    """An issue's label outbox, status comments, escalations, stops, text and refusals."""

    # Labels: the outbox -------------------------------------------------

    def label_set(self, issue: IssueRef) -> Labels | None:
        """Return the Baton labels recorded for the issue's repository with its desired label."""
        value = self.redis.get(keys.label_set(issue))
        return None if value is None else Labels.model_validate_json(text(value))

    def desired_label(self, issue: IssueRef) -> str | None:
        """Return the Baton state label the issue should carry, if one was recorded."""
        value = self.redis.get(keys.desired_label(issue))
        return (text(value) or None) if value is not None else None

    def record_state_label(
        self,
        issue: IssueRef,
        label: str | None,
        labels: Labels,
        plan: Callable[[str | None, bool, frozenset[str]], tuple[bool, frozenset[str]]],
    ) -> tuple[bool, frozenset[str]]:
        """Record label as the issue's desired Baton label, planned from what was recorded.

        plan takes the label desired so far, whether it was applied, and the labels
        still to take off; it returns whether label is on already and what is to come
        off now. The whole change is one transaction; its outcome is returned.
        """
        desired_key = keys.desired_label(issue)
        applied_key = keys.label_applied(issue)
        removals_key = keys.label_removals(issue)
        outcome: list[tuple[bool, frozenset[str]]] = []

        def change(pipe: redis.client.Pipeline) -> None:
            before = pipe.get(desired_key)
            applied = pipe.get(applied_key) != "0"  # unrecorded: applied by an older Baton
            removals = frozenset(text(name) for name in pipe.smembers(removals_key))
            planned = plan(text(before) or None if before is not None else None, applied, removals)
            outcome[:] = [planned]
            pipe.multi()
            pipe.set(desired_key, label or "", ex=RUN_TTL_S)
            pipe.set(keys.label_set(issue), labels.model_dump_json(), ex=RUN_TTL_S)
            pipe.set(applied_key, "1" if planned[0] else "0", ex=RUN_TTL_S)
            pipe.delete(removals_key)
            if planned[1]:
                pipe.sadd(removals_key, *sorted(planned[1]))
                pipe.expire(removals_key, RUN_TTL_S)

        self.redis.transaction(change, desired_key, applied_key, removals_key)
        return outcome[0]

    def label_progress(self, issue: IssueRef) -> tuple[bool, frozenset[str]]:
        """Return whether the desired Baton label is on, and which labels are still to come off."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.label_applied(issue))
            pipe.smembers(keys.label_removals(issue))
            applied, removals = pipe.execute()
        return applied != "0", frozenset(text(name) for name in removals)

    def label_added(self, issue: IssueRef, label: str) -> None:
        """Record that label, if still the desired one, is on the issue."""
        if self.desired_label(issue) == label:
            self.redis.set(keys.label_applied(issue), "1", ex=RUN_TTL_S)

    def take_label_removal(self, issue: IssueRef, name: str) -> bool:
        """Take name off the labels still to come off; False if another job took it first."""
        return bool(self.redis.srem(keys.label_removals(issue), name))

    def return_label_removal(self, issue: IssueRef, name: str) -> None:
        """Put name back among the labels to come off (taking it off failed)."""
        key = keys.label_removals(issue)
        with self.redis.pipeline() as pipe:
            pipe.sadd(key, name)
            pipe.expire(key, RUN_TTL_S)
            pipe.execute()

    # Status comments, and what they say ------------------------------------

    def status_comment(self, issue: IssueRef) -> int | None:
        """Return the id of the issue's status comment, if one was posted."""
        value = self.redis.get(keys.status_comment(issue))
        return int(value) if value is not None else None

    def set_status_comment(self, issue: IssueRef, comment_id: int) -> None:
        """Remember the issue's status comment so it is edited, never posted twice."""
        self.redis.set(keys.status_comment(issue), comment_id, ex=RUN_TTL_S)

    def pull_status_comment(self, repo: str, number: int) -> int | None:
        """Return the id of a pull request's status comment, if one was posted."""
        value = self.redis.get(keys.pull_status_comment(repo, number))
        return int(value) if value is not None else None

    def set_pull_status_comment(self, repo: str, number: int, comment_id: int) -> None:
        """Remember a pull request's status comment so it is edited, never posted twice."""
        self.redis.set(keys.pull_status_comment(repo, number), comment_id, ex=RUN_TTL_S)

    def status_written(self, repo: str, comment_id: int) -> str | None:
        """Return the key of what a status comment last said, if Baton recorded it."""
        value = self.redis.get(keys.comment_said(repo, comment_id))
        return None if value is None else text(value)

    def record_status_written(self, repo: str, comment_id: int, key: str) -> None:
        """Record the key of what a status comment says now."""
        self.redis.set(keys.comment_said(repo, comment_id), key, ex=RUN_TTL_S)

    def check_run(self, repo: str, sha: str) -> CheckRunRecord | None:
        """Return Baton's check run on a head, as last written, if it has one."""
        value = self.redis.get(keys.check_run(repo, sha))
        return None if value is None else CheckRunRecord.model_validate_json(text(value))

    def record_check_run(self, repo: str, sha: str, record: CheckRunRecord) -> None:
        """Record Baton's check run on a head as written: updates go to the same one."""
        self.redis.set(keys.check_run(repo, sha), record.model_dump_json(), ex=RUN_TTL_S)

    def record_draft(self, repo: str, number: int, node_id: str) -> None:
        """Remember a pull request Baton opened as a draft, by its GraphQL id."""
        self.redis.set(keys.draft_pull(repo, number), node_id, ex=RUN_TTL_S)

    def draft_node(self, repo: str, number: int) -> str | None:
        """Return the GraphQL id of a pull request Baton opened as a draft and left so."""
        value = self.redis.get(keys.draft_pull(repo, number))
        return None if value is None else text(value)

    def forget_draft(self, repo: str, number: int) -> None:
        """Forget a draft pull request once it is ready for review."""
        self.redis.delete(keys.draft_pull(repo, number))

    def comment_lock(self, issue: IssueRef) -> AbstractAsyncContextManager[None]:
        """Hold the issue's comment mutex, so two jobs never edit its comments out of order.

        Its writes may wait for their slots in the installation's pace, so it is kept
        for as long as they take; a job that waits for it past COMMENT_LOCK_WAIT_S gets
        MutexBusy.
        """
        return self._kept_mutex(keys.comment_lock(issue), COMMENT_LOCK_TTL_MS, COMMENT_LOCK_WAIT_S)

    @asynccontextmanager
    async def status_turn(self, issue: IssueRef) -> AsyncIterator[Callable[[], bool]]:
        """Hold the issue's comment mutex for a status edit, in turn; yield whether the edit
        is still the newest asked for (one asked for since, waiting its turn, overtakes it)."""
        key = keys.status_turns(issue)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, STATUS_TURNS_TTL_S)
            turn = int(pipe.execute()[0])
        async with self.comment_lock(issue):
            yield lambda: int(self.redis.get(key) or 0) <= turn

    # Escalations ----------------------------------------------------------

    def first_escalation(self, issue: IssueRef, reason: str, attempt: int) -> bool:
        """Record an escalation; False if this one (issue, reason, attempt) was recorded before."""
        key = keys.escalated(issue, attempt, reason)
        return bool(self.redis.set(key, "1", nx=True, ex=RUN_TTL_S))

    def forget_escalation(self, issue: IssueRef, reason: str, attempt: int) -> None:
        """Forget an escalation whose comment could not be posted, so a retry posts it."""
        self.redis.delete(keys.escalated(issue, attempt, reason))

    # Stop requests ------------------------------------------------------

    def record_withdrawal(self, issue: IssueRef, at: datetime) -> None:
        """Record that a maintainer withdrew the issue at an instant (took its label off)."""
        self.redis.set(keys.withdrawn(issue), at.isoformat(), ex=RUN_TTL_S)

    def withdrawn_since(self, issue: IssueRef, since: datetime) -> bool:
        """Return whether a maintainer withdrew the issue after since."""
        value = self.redis.get(keys.withdrawn(issue))
        return value is not None and datetime.fromisoformat(text(value)) > since

    def request_stop(self, issue: IssueRef) -> None:
        """Ask whoever runs the issue to stop (an operator closed the issue)."""
        self.redis.set(keys.stop(issue), "1", ex=STOP_TTL_S)

    def stop_requested(self, issue: IssueRef) -> bool:
        """Return whether an operator asked the issue's run to stop."""
        return bool(self.redis.exists(keys.stop(issue)))

    def clear_stop(self, issue: IssueRef) -> None:
        """Forget a stop request once it was honoured (or a new run begins)."""
        self.redis.delete(keys.stop(issue))

    # The issue's text as queued (bot/domain/issue_text.py) --------------------------

    def queued_text(self, issue: IssueRef) -> IssueText | None:
        """Return the issue's text as queued, with the edits made since, if recorded."""
        raw = self.redis.get(keys.queued_text(issue))
        return None if raw is None else IssueText.model_validate_json(raw)

    def update_queued_text(
        self, issue: IssueRef, change: Callable[[IssueText | None], IssueText | None]
    ) -> IssueText | None:
        """Apply change to the issue's text record atomically; return it, or None if unchanged.

        change is a pure function of the record as stored (None when there is none);
        it returns None to leave it as it is. The record lives until the issue is
        queued again, or closed (or for RUN_TTL_S untouched).
        """
        key = keys.queued_text(issue)
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]
                    raw = pipe.get(key)
                    current = None if raw is None else IssueText.model_validate_json(raw)
                    new = change(current)
                    if new is None:
                        pipe.unwatch()
                        return None
                    pipe.multi()
                    pipe.set(key, new.model_dump_json(), ex=RUN_TTL_S)
                    pipe.execute()
                    return new
                except WatchError:
                    continue

    # What was handled or told once ------------------------------------------

    def first_command(self, repo: str, comment_id: int) -> bool:
        """Record that a command comment was handled; False if it was before (a redelivery)."""
        return bool(self.redis.set(keys.command(repo, comment_id), "1", nx=True, ex=RUN_TTL_S))

    def forget_command(self, repo: str, comment_id: int) -> None:
        """Let a retried job handle a command whose handling failed."""
        self.redis.delete(keys.command(repo, comment_id))

    def first_review(self, repo: str, review_id: int) -> bool:
        """Record that a review acted on a run; False if one did before (a redelivery)."""
        return bool(self.redis.set(keys.review(repo, review_id), "1", nx=True, ex=RUN_TTL_S))

    def first_rerun(self, repo: str, delivery_id: str) -> bool:
        """Record that a re-run of Baton's check run was handled; False if it was before."""
        return bool(self.redis.set(keys.rerun(repo, delivery_id), "1", nx=True, ex=RUN_TTL_S))

    def forget_rerun(self, repo: str, delivery_id: str) -> None:
        """Let a retried job handle a re-run whose handling failed."""
        self.redis.delete(keys.rerun(repo, delivery_id))

    def first_queue_refusal(self, issue: IssueRef) -> bool:
        """Record that the issue was told who may queue it; False if it was already."""
        return bool(self.redis.set(keys.queue_refused(issue), "1", nx=True, ex=RUN_TTL_S))

    def forget_queue_refusal(self, issue: IssueRef) -> None:
        """Forget that the issue was told who may queue it (the comment was not posted)."""
        self.redis.delete(keys.queue_refused(issue))

    def first_config_error(self, issue: IssueRef, blob_sha: str) -> bool:
        """Record that the issue was told of an invalid file version; False if it was already."""
        key = keys.config_error(issue, blob_sha)
        return bool(self.redis.set(key, "1", nx=True, ex=RUN_TTL_S))

    def forget_config_error(self, issue: IssueRef, blob_sha: str) -> None:
        """Forget that the issue was told of an invalid file version (it was not posted)."""
        self.redis.delete(keys.config_error(issue, blob_sha))

    # An issue that is gone ------------------------------------------------

    def forget_issue(self, issue: IssueRef) -> None:
        """Drop what Baton keeps to work on an issue that is gone; its run records expire."""
        member = keys.indexed_issue(issue)
        with self.redis.pipeline() as pipe:
            for index in (keys.IN_FLIGHT, keys.WAITING, keys.HALTED):
                pipe.zrem(index, member)
            pipe.zrem(keys.slots(issue.repo), str(issue.number))
            pipe.delete(
                keys.status_comment(issue),
                keys.desired_label(issue),
                keys.label_set(issue),
                keys.label_applied(issue),
                keys.label_removals(issue),
                keys.queued_text(issue),
                keys.queue_refused(issue),
                keys.extra_continuations(issue),
                keys.issue_chain(issue),
            )
            pipe.execute()
