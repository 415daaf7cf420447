"""Baton's calls to GitHub's REST API, each returning what it read as a typed resource.

Every REST call Baton makes for its work goes through this module, and each answer
is validated into a model of bot/domain/resources.py here, so no other module reads
GitHub's JSON. Authentication stays with bot/edges/github.py: minting and caching
installation tokens and learning the App's own login (GET /app) are calls it makes
as the App, with its JWT, to set up the clients this module is handed.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from gidgethub import BadRequest
from gidgethub.abc import GitHubAPI

from bot.domain.check_run import CHECK_RUN_NAME, CheckRunView
from bot.domain.checks import combined_state
from bot.domain.manifest import AppCredentials
from bot.domain.model import IssueRef
from bot.domain.plans.redelivery import HookDelivery, within
from bot.domain.repo_config import (
    CONFIG_PATH,
    ConfigError,
    ConfigProblem,
    InvalidRepoConfig,
    RepoConfig,
    RepoFile,
    parse_repo_config,
)
from bot.domain.resources import (
    App,
    CheckRun,
    CheckSuite,
    CollaboratorPermission,
    CombinedStatus,
    CommitStatus,
    ContentEntry,
    ContentFile,
    DiffFile,
    Forked,
    Installation,
    InstallationToken,
    Issue,
    IssueComment,
    IssueEvent,
    Label,
    PullRequest,
    Repository,
    Review,
    ReviewComment,
    User,
)
from bot.edges.github import GitHubApp, GitHubClient
from bot.edges.store import Store

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- the App and its installations


async def read_app(gh: GitHubClient) -> App:
    """Return the App the client's JWT authenticates (a client of GitHubApp.app_client)."""
    return App.model_validate(await gh.getitem("/app"))


async def first_installation(gh: GitHubClient) -> Installation | None:
    """Return one installation of the App, None when it has none (an App client)."""
    found = await gh.getitem("/app/installations?per_page=1")
    return Installation.model_validate(found[0]) if found else None


async def list_installations(gh: GitHubClient) -> AsyncIterator[Installation]:
    """Yield every installation of the App, page by page (an App client)."""
    async for installation in gh.getiter("/app/installations"):
        yield Installation.model_validate(installation)


async def create_installation_token(gh: GitHubClient, installation_id: int) -> InstallationToken:
    """Mint an installation token with the App's JWT (an App client), for what it may do."""
    minted = await gh.post(
        "/app/installations/{installation_id}/access_tokens",
        {"installation_id": installation_id},
        data=b"",
    )
    return InstallationToken.model_validate(minted)


async def list_installation_repositories(gh: GitHubClient) -> list[Repository]:
    """Return every repository the installation reaches (an installation client)."""
    return [
        Repository.model_validate(repo)
        async for repo in gh.getiter("/installation/repositories", iterable_key="repositories")
    ]


async def convert_manifest_code(gh: GitHubAPI, code: str) -> AppCredentials:
    """Exchange an App manifest's one-time code for the new App (the code is the credential)."""
    data = await gh.post("/app-manifests/{code}/conversions", {"code": code}, data={})
    return AppCredentials.model_validate(data)


async def read_user(gh: GitHubClient, login: str) -> User:
    """Return an account by its login."""
    return User.model_validate(await gh.getitem("/users/{login}", {"login": login}))


async def learn_app_id(app: GitHubApp, store: Store) -> int:
    """Return the App's numeric id, asked of GitHub once (GET /app).

    GITHUB_APP_ID may be the App's client ID, as GitHub recommends for its JWTs; GitHub
    names the App of each check suite and run by the number alone.
    """
    known = store.app_id(app.identity)
    if known is not None:
        return known
    found = await read_app(app.app_client())
    store.set_app_id(app.identity, found.id)
    return found.id


async def learn_bot_user_id(app: GitHubApp, store: Store, installation_id: int) -> int:
    """Return the App's bot account's id, asked of GitHub once (commits are addressed by it)."""
    known = store.bot_user_id()
    if known is not None:
        return known
    login = await app.learn_bot_login()
    user = await read_user(await app.for_installation(installation_id), login)
    store.set_bot_user_id(user.id)
    return user.id


# ---------------------------------------------------------------- issues, labels and comments


async def read_issue(gh: GitHubClient, issue: IssueRef) -> Issue:
    """Return the issue as GitHub has it now."""
    url_vars: dict[str, str | int] = {"repo": issue.repo, "number": issue.number}
    return Issue.model_validate(await gh.getitem("/repos/{+repo}/issues/{number}", url_vars))


async def list_open_issues(gh: GitHubClient, repo: str, label: str) -> AsyncIterator[Issue]:
    """Yield the repository's open issues (and pull requests) that carry label, page by page."""
    url_vars = {"repo": repo, "label": label}
    async for issue in gh.getiter("/repos/{+repo}/issues?state=open&labels={label}", url_vars):
        yield Issue.model_validate(issue)


async def list_issue_events(gh: GitHubClient, issue: IssueRef) -> list[IssueEvent]:
    """Return everything that happened to the issue, oldest first, every page."""
    url_vars = {"repo": issue.repo, "number": issue.number}
    return [
        IssueEvent.model_validate(event)
        async for event in gh.getiter("/repos/{+repo}/issues/{number}/events", url_vars)
    ]


async def swap_labels(
    gh: GitHubClient, issue: IssueRef, *, add: str | None, remove: set[str]
) -> None:
    """Put add on the issue, then take remove off: never a moment without a Baton state label."""
    if add is not None:
        await add_label(gh, issue, add)
    for name in sorted(remove - {add}):
        await remove_label(gh, issue, name)


async def add_label(gh: GitHubClient, issue: IssueRef, name: str) -> set[str]:
    """Add one label to the issue; return every label it carries then (GitHub's answer)."""
    url_vars: dict[str, str | int] = {"repo": issue.repo, "number": issue.number}
    carried = await gh.post(
        "/repos/{+repo}/issues/{number}/labels", url_vars, data={"labels": [name]}
    )
    return {Label.model_validate(label).name for label in carried}


async def remove_label(gh: GitHubClient, issue: IssueRef, name: str) -> None:
    """Take one label off the issue; one already gone is what was wanted."""
    url_vars: dict[str, str | int] = {"repo": issue.repo, "number": issue.number, "name": name}
    try:
        await gh.delete("/repos/{+repo}/issues/{number}/labels/{name}", url_vars)
    except BadRequest as exc:
        if exc.status_code != 404:
            raise


async def read_comment(gh: GitHubClient, repo: str, comment_id: int) -> IssueComment:
    """Return a comment on an issue or pull request."""
    url_vars: dict[str, str | int] = {"repo": repo, "id": comment_id}
    found = await gh.getitem("/repos/{+repo}/issues/comments/{id}", url_vars)
    return IssueComment.model_validate(found)


async def upsert_comment(
    gh: GitHubClient, repo: str, number: int, comment_id: int | None, body: str
) -> int:
    """Edit comment_id in place, or post a new comment if there is none (or it was deleted)."""
    if comment_id is not None:
        try:
            await gh.patch(
                "/repos/{+repo}/issues/comments/{id}",
                {"repo": repo, "id": comment_id},
                data={"body": body},
            )
            return comment_id
        except BadRequest as exc:
            if exc.status_code != 404:
                raise
            log.info("%s#%d: comment %s was deleted; posting a new one", repo, number, comment_id)
    comment = await gh.post(
        "/repos/{+repo}/issues/{number}/comments",
        {"repo": repo, "number": number},
        data={"body": body},
    )
    return IssueComment.model_validate(comment).id


async def post_comment(gh: GitHubClient, issue: IssueRef, body: str) -> IssueComment:
    """Post a new comment on the issue; return it (its address links to it)."""
    posted = await gh.post(
        "/repos/{+repo}/issues/{number}/comments",
        {"repo": issue.repo, "number": issue.number},
        data={"body": body},
    )
    return IssueComment.model_validate(posted)


async def create_reaction(gh: GitHubClient, repo: str, comment_id: int, content: str) -> None:
    """React to a comment on an issue or pull request (`+1`, `confused`, ...)."""
    await gh.post(
        "/repos/{+repo}/issues/comments/{id}/reactions",
        {"repo": repo, "id": comment_id},
        data={"content": content},
    )


# ---------------------------------------------------------------- repositories


async def read_repository(gh: GitHubClient, store: Store, repo: str) -> Repository:
    """Return the repository (its default branch and clone URL), read at most once an hour.

    Both change rarely (a rename, a new default branch), while the repository's own
    answer changes with every push, so a conditional read of it is seldom free.
    """
    seen = store.seen_repository(repo)
    if seen is not None:
        # What was kept may not hold the full name: the name it is kept under is.
        return Repository.model_validate({"full_name": repo, **seen})
    read = Repository.model_validate(await gh.getitem("/repos/{+repo}", {"repo": repo}))
    store.see_repository(repo, read.model_dump())
    return read


async def read_forked(gh: GitHubClient, repo: str) -> Forked:
    """Return a repository with the one it is a fork of, read now (nothing kept of it)."""
    return Forked.model_validate(await gh.getitem("/repos/{+repo}", {"repo": repo}))


async def delete_branch(gh: GitHubClient, repo: str, branch: str) -> bool:
    """Delete a branch; return False when it was gone already (GitHub's 422)."""
    try:
        await gh.delete("/repos/{+repo}/git/refs/heads/{+branch}", {"repo": repo, "branch": branch})
    except BadRequest as exc:
        if exc.status_code != 422:
            raise
        return False
    return True


async def read_fork_of(app: GitHubApp, name: str, parent: str) -> tuple[Forked, int] | None:
    """Return the repository name, a fork of parent, read through the App's installation
    on its account, with that installation's id; None when there is no such fork the
    App reaches (either is missing: GitHub's 404; or it is not parent's fork)."""
    try:
        installation = await read_repo_installation(app.app_client(), name)
        fork = await read_forked(await app.for_installation(installation.id), name)
    except BadRequest as exc:
        if exc.status_code != 404:
            raise
        return None
    if fork.parent is None or fork.parent.full_name.casefold() != parent.casefold():
        return None
    return fork, installation.id


async def read_repo_installation(gh: GitHubClient, repo: str) -> Installation:
    """Return the App's installation on a repository's account (an App client); 404: none."""
    found = await gh.getitem("/repos/{+repo}/installation", {"repo": repo})
    return Installation.model_validate(found)


async def read_collaborator_permission(
    gh: GitHubClient, repo: str, login: str
) -> CollaboratorPermission:
    """Return a login's permission on the repository; GitHub answers 404 for a stranger."""
    url_vars = {"repo": repo, "login": login}
    found = await gh.getitem("/repos/{+repo}/collaborators/{login}/permission", url_vars)
    return CollaboratorPermission.model_validate(found)


async def read_content_file(gh: GitHubClient, repo: str, path: str, ref: str) -> ContentFile:
    """Return one file of the repository at ref; GitHub answers 404 when there is none."""
    url_vars = {"repo": repo, "path": path, "ref": ref}
    entry = await gh.getitem("/repos/{+repo}/contents/{+path}{?ref}", url_vars)
    return ContentFile.model_validate(entry)


async def load_repo_config(gh: GitHubClient, store: Store, repo: str, ref: str) -> RepoFile:
    """Return the repository's `.github/baton.yml` at ref; the defaults when there is none.

    Validated once per version of the file (its blob sha); raises InvalidRepoConfig.
    Whether this deployment allows what a valid file asks for is the caller's to ask
    (RepoFile.refused_by). The repository's queue label is remembered for the web
    process, which routes `labeled` events without calling GitHub.
    """
    file = await _read_repo_config(gh, store, repo, ref)
    store.record_queue_label(repo, file.config.labels.queue)
    return file


async def _read_repo_config(gh: GitHubClient, store: Store, repo: str, ref: str) -> RepoFile:
    seen = store.seen_repo_file(repo, ref)
    if seen is not None:
        # Read within the hour at this ref: a push that changes it is read at once.
        blob_sha, text = seen
        return _validated(store, repo, blob_sha, text) if blob_sha else RepoFile()
    try:
        entry = await read_content_file(gh, repo, CONFIG_PATH, ref)
    except BadRequest as exc:
        if exc.status_code == 404:
            store.see_repo_file(repo, ref, "", "")
            return RepoFile()
        raise
    try:
        text = base64.b64decode(entry.content).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        problem = ConfigProblem("", f"the file is not UTF-8 text ({exc})")
        raise InvalidRepoConfig(entry.sha, ConfigError([problem])) from exc
    store.see_repo_file(repo, ref, entry.sha, text)
    return _validated(store, repo, entry.sha, text)


WORKFLOWS_DIR = ".github/workflows"


async def read_workflows(gh: GitHubClient, repo: str, ref: str) -> dict[str, str]:
    """Return the repository's GitHub Actions workflow files at ref, by path; none without.

    A file that is not UTF-8 text is read with its bytes replaced: it is only judged.
    """
    url_vars = {"repo": repo, "path": WORKFLOWS_DIR, "ref": ref}
    try:
        listing = await gh.getitem("/repos/{+repo}/contents/{+path}{?ref}", url_vars)
    except BadRequest as exc:
        if exc.status_code == 404:
            return {}
        raise
    entries = [ContentEntry.model_validate(entry) for entry in listing]
    found = {}
    for entry in entries:
        if entry.type == "file" and entry.name.endswith((".yml", ".yaml")):
            file = await read_content_file(gh, repo, entry.path, ref)
            found[entry.path] = base64.b64decode(file.content).decode(errors="replace")
    return found


def _validated(store: Store, repo: str, blob_sha: str, text: str) -> RepoFile:
    """Return one version of the file validated, once per blob; raise InvalidRepoConfig."""
    cached = store.cached_repo_config(repo, blob_sha)
    if cached is not None:
        return RepoFile(RepoConfig.model_validate_json(cached), blob_sha, text)
    try:
        config = parse_repo_config(text)
    except ConfigError as exc:
        raise InvalidRepoConfig(blob_sha, exc) from exc
    store.cache_repo_config(repo, blob_sha, config.model_dump_json())
    return RepoFile(config, blob_sha, text)


# ---------------------------------------------------------------- pull requests


async def read_pull(gh: GitHubClient, repo: str, number: int) -> PullRequest:
    """Return the pull request as GitHub has it now.

    Its `mergeable` is null until GitHub's background job has compared its head with
    its base as they are now; a read starts that job, and a later read has its answer.
    """
    url_vars: dict[str, str | int] = {"repo": repo, "number": number}
    return PullRequest.model_validate(await gh.getitem("/repos/{+repo}/pulls/{number}", url_vars))


async def update_pull_branch(
    gh: GitHubClient, repo: str, number: int, expected_head_sha: str
) -> str | None:
    """Ask GitHub to merge the base branch into the pull request's head ("Update branch").

    GitHub accepts (202) and makes the merge commit in the background; it refuses (422)
    when the head is no longer expected_head_sha, the base has nothing new, or the merge
    conflicts. Returns None when accepted, GitHub's reason when refused.
    """
    url_vars: dict[str, str | int] = {"repo": repo, "number": number}
    try:
        await gh.put(
            "/repos/{+repo}/pulls/{number}/update-branch",
            url_vars,
            data={"expected_head_sha": expected_head_sha},
        )
    except BadRequest as exc:
        if exc.status_code != 422:
            raise
        return str(exc) or "refused"
    return None


async def update_pull(
    gh: GitHubClient,
    repo: str,
    number: int,
    *,
    title: str | None = None,
    body: str | None = None,
    base: str | None = None,
) -> PullRequest:
    """Change a pull request's title, body or base branch (those given); return it then."""
    asked = {"title": title, "body": body, "base": base}
    fields = {name: value for name, value in asked.items() if value is not None}
    url_vars: dict[str, str | int] = {"repo": repo, "number": number}
    updated = await gh.patch("/repos/{+repo}/pulls/{number}", url_vars, data=fields)
    return PullRequest.model_validate(updated)


# GitHub's 422 for a draft where drafts are not available: a private repository of an
# account on GitHub Free ("Create a pull request").
DRAFTS_REFUSED = "draft pull requests are not supported"


class DraftsRefused(BadRequest):
    """GitHub does not take draft pull requests in this repository: 422."""


async def open_or_update_pr(
    gh: GitHubClient,
    issue: IssueRef,
    *,
    branch: str,
    head_owner: str,
    base: str,
    title: str,
    body: str,
    number: int | None = None,
    draft: bool = False,
) -> PullRequest:
    """Open the branch's pull request, or update the open one: never two for one branch.

    number is the open PR the attempt took over, updated in one call while it is still
    open. Otherwise the PR is opened, as a draft where draft says so; GitHub refuses a
    second open PR for a branch (422), and then the open one is found and updated. An
    update leaves a pull request's draft state as it is. A draft the repository cannot
    have raises DraftsRefused. head_owner is the account the branch is in: the
    repository's owner, or a fork's.
    """
    head = f"{head_owner}:{branch}"
    if number is not None:
        updated = await update_pull(gh, issue.repo, number, title=title, body=body, base=base)
        if updated.state == "open":
            return updated
    fields = {"title": title, "body": body, "base": base}
    try:
        created = await gh.post(
            "/repos/{+repo}/pulls",
            {"repo": issue.repo},
            data={**fields, "head": head, "draft": draft},
        )
    except BadRequest as exc:
        if exc.status_code != 422:
            raise
        if draft and DRAFTS_REFUSED in str(exc).lower():
            raise DraftsRefused(exc.status_code, str(exc), headers=exc.headers) from exc
        existing = [
            PullRequest.model_validate(pr)
            async for pr in gh.getiter(
                "/repos/{+repo}/pulls{?state,head}",
                {"repo": issue.repo, "state": "open", "head": head},
            )
        ]
        if not existing:
            raise  # refused for another reason: the caller reports it
        return PullRequest.model_validate(await gh.patch(existing[0].url, data=fields))
    return PullRequest.model_validate(created)


MARK_READY_FOR_REVIEW = """
mutation MarkReadyForReview($pullRequestId: ID!) {
  markPullRequestReadyForReview(input: {pullRequestId: $pullRequestId}) {
    pullRequest { isDraft }
  }
}
"""


async def mark_ready_for_review(gh: GitHubClient, node_id: str) -> bool:
    """Take a draft pull request out of draft (GraphQL: REST has no call for it).

    node_id is the pull request's GraphQL id, as its REST answers carry it. Returns
    whether it is a draft still, as GitHub answers.
    """
    data = await gh.graphql(
        MARK_READY_FOR_REVIEW, endpoint=graphql_endpoint(gh.base_url), pullRequestId=node_id
    )
    return bool(data["markPullRequestReadyForReview"]["pullRequest"]["isDraft"])


def graphql_endpoint(api_url: str) -> str:
    """Return the GraphQL endpoint beside a REST API's base address.

    GitHub's is api.github.com/graphql; GitHub Enterprise Server's REST API lives at
    /api/v3 and its GraphQL at /api/graphql.
    """
    base = api_url.rstrip("/")
    if base.endswith("/api/v3"):
        return base.removesuffix("/v3") + "/graphql"
    return base + "/graphql"


async def list_pull_files(gh: GitHubClient, repo: str, number: int) -> list[DiffFile]:
    """Return the files of a pull request's diff, every page (GitHub lists at most 3000)."""
    url_vars = {"repo": repo, "number": number}
    return [
        DiffFile.model_validate(entry)
        async for entry in gh.getiter("/repos/{+repo}/pulls/{number}/files", url_vars)
    ]


async def list_reviews(gh: GitHubClient, repo: str, number: int) -> list[Review]:
    """Return the reviews of a pull request, oldest first, every page."""
    url_vars = {"repo": repo, "number": number}
    return [
        Review.model_validate(review)
        async for review in gh.getiter("/repos/{+repo}/pulls/{number}/reviews", url_vars)
    ]


async def list_review_comments(gh: GitHubClient, repo: str, number: int) -> list[ReviewComment]:
    """Return the comments on the lines of a pull request's diff, every page."""
    url_vars = {"repo": repo, "number": number}
    return [
        ReviewComment.model_validate(comment)
        async for comment in gh.getiter("/repos/{+repo}/pulls/{number}/comments", url_vars)
    ]


# ---------------------------------------------------------------- checks and statuses


@dataclass(frozen=True)
class HeadChecks:
    """Everything a head's CI reported, every page of it: Baton's own suite included."""

    suites: list[CheckSuite]
    combined_status: CombinedStatus


async def read_head_checks(gh: GitHubClient, repo: str, sha: str) -> HeadChecks:
    """Return every check suite and commit status reported on a head, every page."""
    return HeadChecks(
        await list_check_suites(gh, repo, sha), await read_combined_status(gh, repo, sha)
    )


async def list_check_suites(gh: GitHubClient, repo: str, sha: str) -> list[CheckSuite]:
    """Return every check suite reported on a head, every page."""
    return [
        CheckSuite.model_validate(suite)
        async for suite in gh.getiter(
            "/repos/{+repo}/commits/{sha}/check-suites",
            {"repo": repo, "sha": sha},
            iterable_key="check_suites",
        )
    ]


async def read_combined_status(gh: GitHubClient, repo: str, sha: str) -> CombinedStatus:
    """Return a head's combined status, its state taken over every page of its statuses."""
    statuses = [
        CommitStatus.model_validate(status)
        async for status in gh.getiter(
            "/repos/{+repo}/commits/{sha}/status",
            {"repo": repo, "sha": sha},
            iterable_key="statuses",
        )
    ]
    state = combined_state([status.model_dump() for status in statuses])
    return CombinedStatus(state=state, total_count=len(statuses), statuses=tuple(statuses))


async def list_check_runs(gh: GitHubClient, repo: str, sha: str) -> list[CheckRun]:
    """Return every check run reported on a head, every page."""
    return [
        CheckRun.model_validate(run)
        async for run in gh.getiter(
            "/repos/{+repo}/commits/{sha}/check-runs",
            {"repo": repo, "sha": sha},
            iterable_key="check_runs",
        )
    ]


async def create_check_run(
    gh: GitHubClient, repo: str, head_sha: str, view: CheckRunView, external_id: str
) -> CheckRun:
    """Create Baton's check run on a head, showing view; external_id names Baton's run."""
    body = {**_check_run_fields(view), "name": CHECK_RUN_NAME, "head_sha": head_sha}
    created = await gh.post(
        "/repos/{+repo}/check-runs", {"repo": repo}, data={**body, "external_id": external_id}
    )
    return CheckRun.model_validate(created)


async def update_check_run(
    gh: GitHubClient, repo: str, check_run_id: int, view: CheckRunView
) -> CheckRun:
    """Make one of Baton's own check runs, still in progress, show view."""
    updated = await gh.patch(
        "/repos/{+repo}/check-runs/{id}",
        {"repo": repo, "id": check_run_id},
        data=_check_run_fields(view),
    )
    return CheckRun.model_validate(updated)


def _check_run_fields(view: CheckRunView) -> dict[str, object]:
    """Return what a check run's create or update sends for view: status, output, details."""
    fields: dict[str, object] = {
        "status": view.status,
        "output": {"title": view.title, "summary": view.summary, "text": view.text},
    }
    if view.conclusion is not None:
        fields["conclusion"] = view.conclusion
    if view.details_url is not None:
        fields["details_url"] = view.details_url
    return fields


async def recent_deliveries(
    gh: GitHubClient, now: datetime, window: timedelta
) -> list[HookDelivery]:
    """Return the App's webhook deliveries of the window, newest first (the App's JWT client).

    GitHub lists them newest first, a cursor's page at a time: reading stops at the
    first one older than the window, so a pass reads only the pages it needs.
    """
    found = []
    async for item in gh.getiter("/app/hook/deliveries", iterable_key=None):
        delivery = HookDelivery.model_validate(item)
        if not within(delivery, now, window):
            break
        found.append(delivery)
    return found


async def redeliver(gh: GitHubClient, delivery_id: int) -> None:
    """Ask GitHub to deliver a delivery's event again (the App's JWT client)."""
    await gh.post(
        "/app/hook/deliveries/{delivery_id}/attempts", {"delivery_id": str(delivery_id)}, data={}
    )
