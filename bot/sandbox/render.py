"""GitHub's JSON shapes for sandbox objects, for REST responses and webhook payloads."""

from __future__ import annotations

import base64
import calendar
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from bot.sandbox.auth import ADMIN_LOGIN, APP_ID
from bot.sandbox.git_backend import CommitInfo, FileChange, TreeEntry
from bot.sandbox.rest import Json
from bot.sandbox.state import (
    CheckRun,
    CheckSuite,
    Comment,
    CommitStatus,
    Installation,
    Issue,
    IssueEvent,
    Label,
    Pull,
    Reaction,
    Repo,
    Review,
    ReviewComment,
    User,
    iso,
    node_id,
    parse_iso,
)

# GitHub's diff limits ("Repository limits"): "Individual files in a diff: 20,000 lines
# that you can load or 1 MB of raw diff data"; past them the API gives no `patch`.
PATCH_LINES_LIMIT = 20_000
PATCH_BYTES_LIMIT = 1_000_000
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "eyes", "rocket")


@dataclass(frozen=True)
class AppFacts:
    """What GitHub shows of an App."""

    id: int
    client_id: str
    slug: str
    name: str
    owner: str
    description: str
    external_url: str
    permissions: Mapping[str, str]
    events: Sequence[str]
    created_at: str


@dataclass(frozen=True)
class PullFacts:
    """What a full pull request shows that lives in git rather than in the state."""

    base_sha: str
    commits: int
    additions: int
    deletions: int
    changed_files: int
    mergeable: bool | None
    mergeable_state: str


def sha_number(sha: str) -> int:
    """Derive a stable integer from a sha, for node ids of git objects."""
    return int(sha[:12], 16)


class Render:
    """Render sandbox objects with URLs rooted at the sandbox's public URL."""

    def __init__(
        self,
        base: str,
        user_of: Callable[[str], User],
        app_of: Callable[[int], AppFacts],
        installations_of: Callable[[int], list[Installation]],
        repo_by_id: Callable[[int], Repo | None],
    ) -> None:
        self.base = base.rstrip("/")
        self.host = urlsplit(self.base).netloc
        self.user_of = user_of
        self.app_of = app_of
        self.installations_of = installations_of
        self.repo_by_id = repo_by_id

    def repo_api(self, repo: Repo) -> str:
        """Return the repository's API URL."""
        return f"{self.base}/repos/{repo.owner}/{repo.name}"

    def repo_html(self, repo: Repo) -> str:
        """Return the repository's web URL."""
        return f"{self.base}/{repo.owner}/{repo.name}"

    def user(self, login: str) -> Json:
        """Render an account (simple-user)."""
        found = self.user_of(login)
        api = f"{self.base}/users/{quote(login)}"
        html = (
            f"{self.base}/apps/{login.removesuffix('[bot]')}"
            if found.type == "Bot"
            else f"{self.base}/{quote(login)}"
        )
        return {
            "login": login,
            "id": found.id,
            "node_id": node_id(found.type, found.id),
            "avatar_url": f"{self.base}/avatars/u/{found.id}",
            "gravatar_id": "",
            "url": api,
            "html_url": html,
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": found.type,
            "site_admin": False,
        }

    def app(self, app_id: int, installations_count: bool = False) -> Json:
        """Render a GitHub App (integration); GET /app also names its client ID and counts its
        installations."""
        facts = self.app_of(app_id)
        data: Json = {
            "id": facts.id,
            "slug": facts.slug,
            "node_id": node_id("Integration", facts.id),
            "owner": self.user(facts.owner),
            "name": facts.name,
            "description": facts.description,
            "external_url": facts.external_url,
            "html_url": self.app_html(facts.slug),
            "created_at": facts.created_at,
            "updated_at": facts.created_at,
            "permissions": dict(facts.permissions),
            "events": list(facts.events),
        }
        if installations_count:
            data["client_id"] = facts.client_id
            data["installations_count"] = len(self.installations_of(app_id))
        return data

    def app_html(self, slug: str) -> str:
        """Return an App's public page."""
        return f"{self.base}/apps/{slug}"

    def installation(self, inst: Installation) -> Json:
        """Render an installation of an App."""
        account = self.user_of(inst.account)
        app = self.app_of(inst.app_id)
        return {
            "id": inst.id,
            "account": self.user(inst.account),
            "repository_selection": "all",
            "access_tokens_url": f"{self.base}/app/installations/{inst.id}/access_tokens",
            "repositories_url": f"{self.base}/installation/repositories",
            "html_url": f"{self.base}/settings/installations/{inst.id}",
            "app_id": app.id,
            "app_slug": app.slug,
            "target_id": account.id,
            "target_type": account.type,
            "permissions": dict(app.permissions),
            "events": list(app.events),
            "created_at": inst.created_at,
            "updated_at": inst.created_at,
            "single_file_name": None,
            "has_multiple_single_files": False,
            "single_file_paths": [],
            "suspended_by": self.user(inst.suspended_by) if inst.suspended_by else None,
            "suspended_at": inst.suspended_at,
        }

    def repo(self, repo: Repo, *, webhook: bool = False, push: bool = False) -> Json:
        """Render a repository: REST full-repository, or the webhook form (push: its own quirks)."""
        api = self.repo_api(repo)
        html = self.repo_html(repo)
        open_issues = sum(1 for issue in repo.issues.values() if issue.state == "open")
        data: Json = {
            "id": repo.id,
            "node_id": node_id("Repository", repo.id),
            "name": repo.name,
            "full_name": repo.full_name,
            "private": repo.private,
            "owner": self.user(repo.owner),
            "html_url": html,
            "description": repo.description,
            "fork": repo.parent_id is not None,
            "url": api,
            "archive_url": f"{api}/{{archive_format}}{{/ref}}",
            "assignees_url": f"{api}/assignees{{/user}}",
            "blobs_url": f"{api}/git/blobs{{/sha}}",
            "branches_url": f"{api}/branches{{/branch}}",
            "collaborators_url": f"{api}/collaborators{{/collaborator}}",
            "comments_url": f"{api}/comments{{/number}}",
            "commits_url": f"{api}/commits{{/sha}}",
            "compare_url": f"{api}/compare/{{base}}...{{head}}",
            "contents_url": f"{api}/contents/{{+path}}",
            "contributors_url": f"{api}/contributors",
            "deployments_url": f"{api}/deployments",
            "downloads_url": f"{api}/downloads",
            "events_url": f"{api}/events",
            "forks_url": f"{api}/forks",
            "git_commits_url": f"{api}/git/commits{{/sha}}",
            "git_refs_url": f"{api}/git/refs{{/sha}}",
            "git_tags_url": f"{api}/git/tags{{/sha}}",
            "git_url": f"git://{self.host}/{repo.full_name}.git",
            "issue_comment_url": f"{api}/issues/comments{{/number}}",
            "issue_events_url": f"{api}/issues/events{{/number}}",
            "issues_url": f"{api}/issues{{/number}}",
            "keys_url": f"{api}/keys{{/key_id}}",
            "labels_url": f"{api}/labels{{/name}}",
            "languages_url": f"{api}/languages",
            "merges_url": f"{api}/merges",
            "milestones_url": f"{api}/milestones{{/number}}",
            "notifications_url": f"{api}/notifications{{?since,all,participating}}",
            "pulls_url": f"{api}/pulls{{/number}}",
            "releases_url": f"{api}/releases{{/id}}",
            "ssh_url": f"git@{urlsplit(self.base).hostname}:{repo.full_name}.git",
            "stargazers_url": f"{api}/stargazers",
            "statuses_url": f"{api}/statuses/{{sha}}",
            "subscribers_url": f"{api}/subscribers",
            "subscription_url": f"{api}/subscription",
            "tags_url": f"{api}/tags",
            "teams_url": f"{api}/teams",
            "trees_url": f"{api}/git/trees{{/sha}}",
            "clone_url": f"{html}.git",
            "mirror_url": None,
            "hooks_url": f"{api}/hooks",
            "svn_url": html,
            "homepage": None,
            "language": None,
            "forks_count": 0,
            "stargazers_count": 0,
            "watchers_count": 0,
            "size": 0,
            "default_branch": repo.default_branch,
            "open_issues_count": open_issues,
            "is_template": False,
            "topics": [],
            "has_issues": True,
            "has_projects": True,
            "has_wiki": True,
            "has_pages": False,
            "has_downloads": True,
            "has_discussions": False,
            "archived": False,
            "disabled": False,
            "visibility": "private" if repo.private else "public",
            "pushed_at": repo.pushed_at,
            "created_at": repo.created_at,
            "updated_at": repo.updated_at,
            "allow_rebase_merge": False,
            "allow_squash_merge": True,
            "allow_merge_commit": True,
            "allow_auto_merge": False,
            "delete_branch_on_merge": repo.delete_branch_on_merge,
            "allow_forking": True,
            "web_commit_signoff_required": False,
            "license": None,
            "forks": 0,
            "open_issues": open_issues,
            "watchers": 0,
            "custom_properties": {},
        }
        if not webhook:
            data.update({"subscribers_count": 0, "network_count": 0})
            data.update(self._lineage(repo))
        if push:
            # Push payloads carry epoch seconds here, and two legacy keys, exactly as GitHub's do.
            data["created_at"] = calendar.timegm(parse_iso(repo.created_at).timetuple())
            data["pushed_at"] = calendar.timegm(parse_iso(repo.pushed_at).timetuple())
            data.update({"stargazers": 0, "master_branch": repo.default_branch})
        return data

    def _lineage(self, repo: Repo) -> Json:
        """Return a fork's `parent` and `source` (the root of its network), as GitHub's full
        repository has them; nothing for a repository that is not a fork."""
        parent = self.repo_by_id(repo.parent_id) if repo.parent_id is not None else None
        if parent is None:
            return {}
        source = parent
        while source.parent_id is not None and (up := self.repo_by_id(source.parent_id)):
            source = up
        return {"parent": self.repo(parent), "source": self.repo(source)}

    def head_repo(self, repo: Repo, pull: Pull) -> Repo | None:
        """Return the repository a pull request's head branch is in: its own, or a fork's
        (None when that fork has been deleted, as GitHub's `head.repo` is then null)."""
        return repo if pull.head_repo_id is None else self.repo_by_id(pull.head_repo_id)

    def repo_ref(self, repo: Repo) -> Json:
        """Render the short repository reference used inside check pull_requests."""
        return {"id": repo.id, "url": self.repo_api(repo), "name": repo.name}

    def label(self, repo: Repo, label: Label) -> Json:
        """Render a label."""
        return {
            "id": label.id,
            "node_id": node_id("Label", label.id),
            "url": f"{self.repo_api(repo)}/labels/{quote(label.name, safe='')}",
            "name": label.name,
            "color": label.color,
            "default": label.default,
            "description": label.description,
        }

    def issue_labels(self, repo: Repo, issue: Issue) -> list[Json]:
        """Render the labels on an issue."""
        return [self.label(repo, lb) for name in issue.labels if (lb := repo.label(name))]

    def reactions(self, url: str, reactions: list[Reaction]) -> Json:
        """Render a reaction rollup."""
        counts: Json = {"url": url, "total_count": len(reactions)}
        counts.update(
            {content: sum(1 for r in reactions if r.content == content) for content in REACTIONS}
        )
        return counts

    def reaction(self, reaction: Reaction) -> Json:
        """Render one reaction."""
        return {
            "id": reaction.id,
            "node_id": node_id("Reaction", reaction.id),
            "user": self.user(reaction.user),
            "content": reaction.content,
            "created_at": reaction.created_at,
        }

    def association(self, repo: Repo, login: str) -> str:
        """Return the author association of a user with a repository."""
        if login == repo.owner:
            return "OWNER"
        if login == ADMIN_LOGIN or login in repo.collaborators:
            return "COLLABORATOR"
        return "NONE"

    def via_app(self, login: str) -> Json | None:
        """Render performed_via_github_app for content the App's bot wrote."""
        return self.app(APP_ID) if self.user_of(login).type == "Bot" else None

    def issue(self, repo: Repo, issue: Issue) -> Json:
        """Render an issue (a pull request's issue side carries `pull_request`)."""
        api = f"{self.repo_api(repo)}/issues/{issue.number}"
        html = f"{self.repo_html(repo)}/{'pull' if issue.pull else 'issues'}/{issue.number}"
        data: Json = {
            "url": api,
            "repository_url": self.repo_api(repo),
            "labels_url": f"{api}/labels{{/name}}",
            "comments_url": f"{api}/comments",
            "events_url": f"{api}/events",
            "html_url": html,
            "id": issue.id,
            "node_id": node_id("Issue", issue.id),
            "number": issue.number,
            "title": issue.title,
            "user": self.user(issue.user),
            "labels": self.issue_labels(repo, issue),
            "state": issue.state,
            "locked": False,
            "assignee": self.user(issue.assignees[0]) if issue.assignees else None,
            "assignees": [self.user(login) for login in issue.assignees],
            "milestone": None,
            "comments": len(issue.comments),
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_at": issue.closed_at,
            "author_association": self.association(repo, issue.user),
            "active_lock_reason": None,
            "body": issue.body,
            "reactions": self.reactions(f"{api}/reactions", []),
            "timeline_url": f"{api}/timeline",
            "performed_via_github_app": self.via_app(issue.user),
            "state_reason": issue.state_reason,
        }
        if issue.pull:
            pr_api = f"{self.repo_api(repo)}/pulls/{issue.number}"
            data["draft"] = issue.pull.draft
            data["pull_request"] = {
                "url": pr_api,
                "html_url": html,
                "diff_url": f"{html}.diff",
                "patch_url": f"{html}.patch",
                "merged_at": issue.pull.merged_at,
            }
        return data

    def comment(self, repo: Repo, issue: Issue, comment: Comment) -> Json:
        """Render an issue comment."""
        api = f"{self.repo_api(repo)}/issues/comments/{comment.id}"
        kind = "pull" if issue.pull else "issues"
        return {
            "url": api,
            "html_url": f"{self.repo_html(repo)}/{kind}/{issue.number}#issuecomment-{comment.id}",
            "issue_url": f"{self.repo_api(repo)}/issues/{issue.number}",
            "id": comment.id,
            "node_id": node_id("IssueComment", comment.id),
            "user": self.user(comment.user),
            "created_at": comment.created_at,
            "updated_at": comment.updated_at,
            "author_association": self.association(repo, comment.user),
            "body": comment.body,
            "reactions": self.reactions(f"{api}/reactions", comment.reactions),
            "performed_via_github_app": self.via_app(comment.user),
        }

    def issue_event(self, repo: Repo, event: IssueEvent) -> Json:
        """Render one event of an issue's events list (a labeled, unlabeled, ... issue event)."""
        data: Json = {
            "id": event.id,
            "node_id": node_id(f"{event.event.capitalize()}Event", event.id),
            "url": f"{self.repo_api(repo)}/issues/events/{event.id}",
            "actor": self.user(event.actor),
            "event": event.event,
            "commit_id": None,
            "commit_url": None,
            "created_at": event.created_at,
            "performed_via_github_app": self.via_app(event.actor),
        }
        if event.label is not None:
            found = repo.label(event.label)
            data["label"] = {"name": event.label, "color": found.color if found else "ededed"}
        return data

    def pull_simple(self, repo: Repo, issue: Issue, base_sha: str) -> Json:
        """Render a pull request as lists and review webhooks show it (pull-request-simple)."""
        pull = issue.pull
        assert pull is not None
        api = f"{self.repo_api(repo)}/pulls/{issue.number}"
        html = f"{self.repo_html(repo)}/pull/{issue.number}"
        issue_api = f"{self.repo_api(repo)}/issues/{issue.number}"
        statuses = f"{self.repo_api(repo)}/statuses/{pull.head_sha}"
        links = {
            "self": api,
            "html": html,
            "issue": issue_api,
            "comments": f"{issue_api}/comments",
            "review_comments": f"{api}/comments",
            "review_comment": f"{self.repo_api(repo)}/pulls/comments{{/number}}",
            "commits": f"{api}/commits",
            "statuses": statuses,
        }
        return {
            "url": api,
            "id": issue.id,
            "node_id": node_id("PullRequest", issue.id),
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": issue_api,
            "number": issue.number,
            "state": issue.state,
            "locked": False,
            "title": issue.title,
            "user": self.user(issue.user),
            "body": issue.body,
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_at": issue.closed_at,
            "merged_at": pull.merged_at,
            "merge_commit_sha": pull.merge_commit_sha,
            "assignee": self.user(issue.assignees[0]) if issue.assignees else None,
            "assignees": [self.user(login) for login in issue.assignees],
            "requested_reviewers": [],
            "requested_teams": [],
            "labels": self.issue_labels(repo, issue),
            "milestone": None,
            "draft": pull.draft,
            "commits_url": links["commits"],
            "review_comments_url": links["review_comments"],
            "review_comment_url": links["review_comment"],
            "comments_url": links["comments"],
            "statuses_url": statuses,
            "head": self._pull_end(self.head_repo(repo, pull), pull.head_ref, pull.head_sha),
            "base": self._pull_end(repo, pull.base_ref, base_sha),
            "_links": {rel: {"href": href} for rel, href in links.items()},
            "author_association": self.association(repo, issue.user),
            "auto_merge": None,
            "active_lock_reason": None,
        }

    def pull(self, repo: Repo, issue: Issue, facts: PullFacts) -> Json:
        """Render a full pull request."""
        pull = issue.pull
        assert pull is not None
        data = self.pull_simple(repo, issue, facts.base_sha)
        data.update(
            {
                "merged": pull.merged_at is not None,
                "mergeable": facts.mergeable,
                "rebaseable": False if facts.mergeable is not None else None,
                "mergeable_state": facts.mergeable_state,
                "merged_by": self.user(pull.merged_by) if pull.merged_by else None,
                "comments": len(issue.comments),
                "review_comments": len(pull.review_comments),
                "maintainer_can_modify": pull.maintainer_can_modify,
                "commits": facts.commits,
                "additions": facts.additions,
                "deletions": facts.deletions,
                "changed_files": facts.changed_files,
            }
        )
        return data

    def _pull_end(self, repo: Repo | None, ref: str, sha: str) -> Json:
        if repo is None:
            return {"label": f"unknown:{ref}", "ref": ref, "sha": sha, "user": None, "repo": None}
        return {
            "label": f"{repo.owner}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self.user(repo.owner),
            "repo": self.repo(repo, webhook=True),
        }

    def pull_minimal(self, repo: Repo, issue: Issue, base_sha: str) -> Json:
        """Render the pull request reference carried by check runs and suites."""
        pull = issue.pull
        assert pull is not None
        return {
            "url": f"{self.repo_api(repo)}/pulls/{issue.number}",
            "id": issue.id,
            "number": issue.number,
            "head": {"ref": pull.head_ref, "sha": pull.head_sha, "repo": self.repo_ref(repo)},
            "base": {"ref": pull.base_ref, "sha": base_sha, "repo": self.repo_ref(repo)},
        }

    def review(self, repo: Repo, issue: Issue, review: Review, *, webhook: bool = False) -> Json:
        """Render a pull request review (webhooks spell its state in lower case)."""
        html = f"{self.repo_html(repo)}/pull/{issue.number}#pullrequestreview-{review.id}"
        pr_api = f"{self.repo_api(repo)}/pulls/{issue.number}"
        data: Json = {
            "id": review.id,
            "node_id": node_id("PullRequestReview", review.id),
            "user": self.user(review.user),
            "body": review.body,
            "state": review.state.lower() if webhook else review.state,
            "html_url": html,
            "pull_request_url": pr_api,
            "author_association": self.association(repo, review.user),
            "_links": {"html": {"href": html}, "pull_request": {"href": pr_api}},
            "commit_id": review.commit_id,
        }
        if review.submitted_at:
            data["submitted_at"] = review.submitted_at
        return data

    def review_comment(self, repo: Repo, issue: Issue, comment: ReviewComment) -> Json:
        """Render a review comment on a line of the diff."""
        api = f"{self.repo_api(repo)}/pulls/comments/{comment.id}"
        html = f"{self.repo_html(repo)}/pull/{issue.number}#discussion_r{comment.id}"
        pr_api = f"{self.repo_api(repo)}/pulls/{issue.number}"
        return {
            "url": api,
            "pull_request_review_id": comment.review_id,
            "id": comment.id,
            "node_id": node_id("PullRequestReviewComment", comment.id),
            "diff_hunk": comment.diff_hunk,
            "path": comment.path,
            "commit_id": comment.commit_id,
            "original_commit_id": comment.commit_id,
            "user": self.user(comment.user),
            "body": comment.body,
            "created_at": comment.created_at,
            "updated_at": comment.created_at,
            "html_url": html,
            "pull_request_url": pr_api,
            "author_association": self.association(repo, comment.user),
            "_links": {
                "self": {"href": api},
                "html": {"href": html},
                "pull_request": {"href": pr_api},
            },
            "start_line": None,
            "original_start_line": None,
            "start_side": None,
            "line": comment.line,
            "original_line": comment.line,
            "side": comment.side,
            "subject_type": "line",
            "reactions": self.reactions(f"{api}/reactions", []),
        }

    def commit(self, repo: Repo, info: CommitInfo, *, webhook: bool = False) -> Json:
        """Render a commit as the REST API (or, with webhook, the status event) shows it."""
        api = self.repo_api(repo)
        html = self.repo_html(repo)
        unknown_user: Json | None = None if webhook else {}
        verification: Json = {
            "verified": False,
            "reason": "unsigned",
            "payload": None,
            "signature": None,
        }
        if not webhook:
            verification["verified_at"] = None
        return {
            "url": f"{api}/commits/{info.sha}",
            "sha": info.sha,
            "node_id": node_id("Commit", sha_number(info.sha)),
            "html_url": f"{html}/commit/{info.sha}",
            "comments_url": f"{api}/commits/{info.sha}/comments",
            "commit": {
                "url": f"{api}/git/commits/{info.sha}",
                "author": {
                    "name": info.author_name,
                    "email": info.author_email,
                    "date": _z(info.author_date),
                },
                "committer": {
                    "name": info.committer_name,
                    "email": info.committer_email,
                    "date": _z(info.committer_date),
                },
                "message": info.message,
                "comment_count": 0,
                "tree": {"sha": info.tree, "url": f"{api}/git/trees/{info.tree}"},
                "verification": verification,
            },
            "author": unknown_user,
            "committer": unknown_user,
            "parents": [
                {"sha": sha, "url": f"{api}/commits/{sha}", "html_url": f"{html}/commit/{sha}"}
                for sha in info.parents
            ],
        }

    def simple_commit(self, info: CommitInfo) -> Json:
        """Render the head_commit of a check suite."""
        return {
            "id": info.sha,
            "tree_id": info.tree,
            "message": info.message,
            "timestamp": _z(info.committer_date),
            "author": {"name": info.author_name, "email": info.author_email},
            "committer": {"name": info.committer_name, "email": info.committer_email},
        }

    def push_commit(self, repo: Repo, info: CommitInfo) -> Json:
        """Render a commit of a push payload."""
        return {
            **self.simple_commit(info),
            "distinct": True,
            "url": f"{self.repo_html(repo)}/commit/{info.sha}",
            "added": info.added,
            "removed": info.removed,
            "modified": info.modified,
        }

    def diff_entry(self, repo: Repo, ref: str, change: FileChange) -> Json:
        """Render one changed file of a pull request or comparison."""
        path = quote(change.filename)
        data: Json = {
            "sha": change.sha,
            "filename": change.filename,
            "status": change.status,
            "additions": change.additions,
            "deletions": change.deletions,
            "changes": change.additions + change.deletions,
            "blob_url": f"{self.repo_html(repo)}/blob/{ref}/{path}",
            "raw_url": f"{self.repo_html(repo)}/raw/{ref}/{path}",
            "contents_url": f"{self.repo_api(repo)}/contents/{path}?ref={ref}",
        }
        if change.patch is not None and _showable(change.patch):
            data["patch"] = change.patch
        if change.previous_filename is not None:
            data["previous_filename"] = change.previous_filename
        return data

    def content(self, repo: Repo, ref: str, entry: TreeEntry, data: bytes | None = None) -> Json:
        """Render a contents entry; a file with `data` carries its base64 content."""
        path = quote(entry.path)
        kind = "dir" if entry.type == "tree" else "file"
        api = f"{self.repo_api(repo)}/contents/{path}?ref={ref}"
        git = f"{self.repo_api(repo)}/git/{'trees' if kind == 'dir' else 'blobs'}/{entry.sha}"
        html = f"{self.repo_html(repo)}/{'tree' if kind == 'dir' else 'blob'}/{ref}/{path}"
        rendered: Json = {
            "type": kind,
            "size": entry.size or 0,
            "name": entry.path.rsplit("/", 1)[-1],
            "path": entry.path,
            "sha": entry.sha,
            "url": api,
            "git_url": git,
            "html_url": html,
            "download_url": None if kind == "dir" else f"{self.repo_html(repo)}/raw/{ref}/{path}",
            "_links": {"self": api, "git": git, "html": html},
        }
        if data is not None:
            encoded = base64.b64encode(data).decode()
            rendered["encoding"] = "base64"
            rendered["content"] = "".join(
                encoded[i : i + 60] + "\n" for i in range(0, len(encoded), 60)
            )
        return rendered

    def check_suite(
        self,
        repo: Repo,
        suite: CheckSuite,
        runs: list[CheckRun],
        pulls: list[Json],
        head: CommitInfo,
        *,
        webhook: bool = False,
    ) -> Json:
        """Render a check suite; the REST form adds the repository."""
        data = self._suite_summary(repo, suite, runs, pulls)
        data.update(
            {
                "rerequestable": True,
                "runs_rerequestable": True,
                "latest_check_runs_count": len(latest_runs(runs)),
                "check_runs_url": f"{data['url']}/check-runs",
                "head_commit": self.simple_commit(head),
            }
        )
        if not webhook:
            data["repository"] = self.repo(repo, webhook=True)
        return data

    def _suite_summary(
        self, repo: Repo, suite: CheckSuite, runs: list[CheckRun], pulls: list[Json]
    ) -> Json:
        """Render the fields a check suite shares with the summary inside its check runs."""
        status, conclusion = suite_outcome(suite, runs)
        return {
            "id": suite.id,
            "node_id": node_id("CheckSuite", suite.id),
            "head_branch": suite.head_branch,
            "head_sha": suite.head_sha,
            "status": status,
            "conclusion": conclusion,
            "url": f"{self.repo_api(repo)}/check-suites/{suite.id}",
            "before": suite.before,
            "after": suite.after,
            "pull_requests": pulls,
            "app": self.app(suite.app_id),
            "created_at": suite.created_at,
            "updated_at": suite.updated_at,
        }

    def check_run(
        self, repo: Repo, run: CheckRun, suite: CheckSuite, runs: list[CheckRun], pulls: list[Json]
    ) -> Json:
        """Render a check run, with the summary of its suite."""
        html = f"{self.repo_html(repo)}/runs/{run.id}"
        api = f"{self.repo_api(repo)}/check-runs/{run.id}"
        return {
            "id": run.id,
            "node_id": node_id("CheckRun", run.id),
            "head_sha": run.head_sha,
            "external_id": run.external_id or "",
            "url": api,
            "html_url": html,
            "details_url": run.details_url or html,
            "status": run.status,
            "conclusion": run.conclusion,
            "started_at": run.started_at,
            "completed_at": run.completed_at,
            "output": {
                "title": run.output.title,
                "summary": run.output.summary,
                "text": run.output.text,
                "annotations_count": 0,
                "annotations_url": f"{api}/annotations",
            },
            "name": run.name,
            "check_suite": self._suite_summary(repo, suite, runs, pulls),
            "app": self.app(run.app_id),
            "pull_requests": pulls,
        }

    def status(self, repo: Repo, status: CommitStatus, *, creator: bool = True) -> Json:
        """Render a commit status (simple-commit-status without the creator)."""
        data: Json = {
            "url": f"{self.repo_api(repo)}/statuses/{status.sha}",
            "avatar_url": self.user(status.creator)["avatar_url"],
            "id": status.id,
            "node_id": node_id("StatusContext", status.id),
            "state": status.state,
            "description": status.description,
            "target_url": status.target_url,
            "context": status.context,
            "created_at": status.created_at,
            "updated_at": status.created_at,
        }
        if creator:
            data["creator"] = self.user(status.creator)
        return data

    def combined_status(
        self, repo: Repo, sha: str, latest: list[CommitStatus], page: list[CommitStatus]
    ) -> Json:
        """Render the combined status of a commit."""
        return {
            "state": combined_state(latest),
            "statuses": [self.status(repo, s, creator=False) for s in page],
            "sha": sha,
            "total_count": len(latest),
            "repository": self.repo(repo, webhook=True),
            "commit_url": f"{self.repo_api(repo)}/commits/{sha}",
            "url": f"{self.repo_api(repo)}/commits/{sha}/status",
        }


_FAILING = ("action_required", "startup_failure", "cancelled", "timed_out", "failure", "stale")


def latest_runs(runs: list[CheckRun]) -> list[CheckRun]:
    """Keep the newest run per App and name: a re-run replaces the run it repeats."""
    newest: dict[tuple[int, str], CheckRun] = {}
    for run in runs:
        newest[(run.app_id, run.name)] = run
    return list(newest.values())


def suite_outcome(suite: CheckSuite, runs: list[CheckRun]) -> tuple[str, str | None]:
    """Return a suite's status and conclusion, queued while a re-run asked of its App is due.

    GitHub ("Rerequest a check run"): "the status of the check suite it belongs to is reset
    to queued and the conclusion is cleared."
    """
    if suite.awaiting_approval:
        # GitHub completes a workflow run awaiting approval as action_required, unstarted.
        return "completed", "action_required"
    return ("queued", None) if suite.requeued else suite_state(runs)


def suite_state(runs: list[CheckRun]) -> tuple[str, str | None]:
    """Derive a suite's status and conclusion from its latest runs, worst conclusion winning."""
    runs = latest_runs(runs)
    if all(r.status == "queued" for r in runs):
        return "queued", None
    if any(r.status != "completed" for r in runs):
        return "in_progress", None
    conclusions = {r.conclusion for r in runs}
    for worst in (*_FAILING, "success", "neutral", "skipped"):
        if worst in conclusions:
            return "completed", worst
    return "completed", "neutral"


def combined_state(latest: list[CommitStatus]) -> str:
    """Combine the latest status of each context the way GitHub does."""
    states = {s.state for s in latest}
    if states & {"error", "failure"}:
        return "failure"
    if not states or "pending" in states:
        return "pending"
    return "success"


def _z(date: str) -> str:
    """Normalize git's strict ISO dates to UTC with a trailing Z."""
    return iso(parse_iso(date))


def _showable(patch: str) -> bool:
    """Tell whether GitHub would show a file's patch: within its diff limits."""
    return patch.count("\n") < PATCH_LINES_LIMIT and len(patch.encode()) <= PATCH_BYTES_LIMIT
