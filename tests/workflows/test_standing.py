"""Who may steer, asked of the sandbox GitHub: roles, who queued an issue, the repository's rule."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from bot.devkit.maintainer import Maintainer
from bot.domain.jobs import review_job
from bot.domain.model import IssueRef
from bot.edges.github import GitHubApp
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings
from bot.workflows.standing import labeller, repository_settings, role_of, standing_of

REPO = "maintainer/widgets"
ISSUE = IssueRef(installation_id=1, repo=REPO, number=1)


async def widgets(
    maintainer: Maintainer, tmp_path: Path, files: dict[str, str] | None = None
) -> None:
    await maintainer.create_repo("widgets", {"README.md": "hi\n", **(files or {})}, tmp_path)
    await maintainer.open_issue(REPO, "Fix it", "Please.")


async def permission_calls(maintainer: Maintainer) -> int:
    calls: dict[str, Any] = await maintainer.gh.getitem("/_sandbox/calls")
    route = "GET /repos/{owner}/{repo}/collaborators/{username}/permission"
    return int(calls.get("installation", {}).get("calls", {}).get(route, 0))


async def test_a_role_is_read_from_github_once_and_kept_briefly(
    app: GitHubApp, maintainer: Maintainer, store: Store, tmp_path: Path
) -> None:
    await widgets(maintainer, tmp_path)
    roles = ("read", "triage", "write", "maintain", "admin")
    for role in roles:
        await maintainer.grant(REPO, f"octo-{role}", role)
    gh = await app.for_installation(1)
    assert [await role_of(gh, store, REPO, f"octo-{role}") for role in roles] == list(roles)
    # The account that owns a personal repository is its admin: GitHub is not asked.
    assert await role_of(gh, store, REPO, "maintainer") == "admin"
    assert await permission_calls(maintainer) == 5
    await maintainer.grant(REPO, "octo-write", "read")  # revoked: it takes effect once it expires
    assert await role_of(gh, store, REPO, "octo-write") == "write"
    assert await permission_calls(maintainer) == 5


async def test_the_rule_judges_people_by_role_and_bots_by_trust_without_asking(
    app: GitHubApp, maintainer: Maintainer, store: Store, settings: Settings, tmp_path: Path
) -> None:
    await widgets(maintainer, tmp_path)
    await maintainer.grant(REPO, "octo-triage", "triage")
    await maintainer.grant(REPO, "octo-write", "write")
    gh = await app.for_installation(1)
    deployed = settings.model_copy(update={"trusted_bots": ["helper[bot]"]})
    verdicts = {
        login: (await standing_of(gh, store, deployed, REPO, login, kind)).allowed
        for login, kind in (
            ("octo-write", "User"),
            ("octo-triage", "User"),
            ("passer-by", "User"),
            ("helper[bot]", "Bot"),
            ("stranger[bot]", "Bot"),
        )
    }
    assert verdicts == {
        "octo-write": True,
        "octo-triage": False,
        "passer-by": False,
        "helper[bot]": True,
        "stranger[bot]": False,
    }
    assert await permission_calls(maintainer) == 3  # a bot's role is never asked for
    stricter = deployed.model_copy(update={"steer_min_role": "admin"})
    assert not (await standing_of(gh, store, stricter, REPO, "octo-write")).allowed


async def test_who_queued_an_issue_is_whoever_last_put_the_label_on(
    app: GitHubApp, maintainer: Maintainer, tmp_path: Path
) -> None:
    await widgets(maintainer, tmp_path)
    await maintainer.grant(REPO, "octo-triage", "triage")
    gh = await app.for_installation(1)
    assert await labeller(gh, ISSUE, "baton:queue") is None
    await maintainer.add_label(REPO, 1, "baton:queue")
    assert await labeller(gh, ISSUE, "baton:queue") == ("maintainer", "User")
    await maintainer.remove_label(REPO, 1, "baton:queue")
    await maintainer.as_user("octo-triage").add_label(REPO, 1, "Baton:Queue")
    await maintainer.add_label(REPO, 1, "bug")
    assert await labeller(gh, ISSUE, "baton:queue") == ("octo-triage", "User")
    assert await labeller(gh, ISSUE, "bug") == ("maintainer", "User")


async def test_a_repository_may_raise_the_role_never_lower_it(
    app: GitHubApp, maintainer: Maintainer, store: Store, settings: Settings, tmp_path: Path
) -> None:
    await widgets(maintainer, tmp_path, {".github/baton.yml": "steer_min_role: maintain\n"})
    gh = await app.for_installation(1)
    assert (await repository_settings(gh, store, settings, REPO)).steer_min_role == "maintain"
    await maintainer.push_to_main(
        REPO, {".github/baton.yml": "steer_min_role: read\n"}, tmp_path, "Let anyone steer"
    )
    store.forget_repo_file(REPO)  # as the push's own job does (jobs/config.py)
    assert (await repository_settings(gh, store, settings, REPO)).steer_min_role == "write"
    await maintainer.push_to_main(REPO, {".github/baton.yml": "steer_min_role: [\n"}, tmp_path, "x")
    store.forget_repo_file(REPO)
    assert (await repository_settings(gh, store, settings, REPO)).steer_min_role == "write"


def test_budget_grants_stop_at_the_cap_even_when_they_race(store: Store) -> None:
    assert store.grant_budget(ISSUE, 4, 10) == (True, 4)
    assert store.grant_budget(ISSUE, 7, 10) == (False, 4)
    results: list[tuple[bool, int]] = []
    threads = [
        threading.Thread(target=lambda: results.append(store.grant_budget(ISSUE, 1, 10)))
        for _ in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(granted for granted, _ in results) == 6
    assert store.extra_continuations(ISSUE) == 10


def test_a_review_or_comment_acts_once_and_an_issue_is_told_once(store: Store) -> None:
    assert store.first_review(REPO, 7) and not store.first_review(REPO, 7)
    assert store.first_review(REPO, 8)
    assert store.first_queue_refusal(ISSUE) and not store.first_queue_refusal(ISSUE)
    store.forget_queue_refusal(ISSUE)
    assert store.first_queue_refusal(ISSUE)


def test_one_review_in_two_deliveries_of_a_batch_is_one_job(dispatch: Dispatcher) -> None:
    job = review_job(1, REPO, 2, 77, "lead", "2026-05-01T12:00:00Z")
    dispatch.enqueue([job, job.model_copy(), review_job(1, REPO, 2, 78, "lead", "")])
    assert dispatch.depths()["baton-events"] == 2
