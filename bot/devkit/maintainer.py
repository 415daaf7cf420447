"""A maintainer driving the sandbox GitHub through GitHub's own REST API and plain git."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from gidgethub.aiohttp import GitHubAPI

from bot.edges.git import Git, Identity
from bot.sandbox.auth import ACT_AS_HEADER, ADMIN_LOGIN

T = TypeVar("T")


class _ActingAs(GitHubAPI):
    """A client whose every request is made as one user (the sandbox's admin token acting)."""

    def __init__(
        self, session: aiohttp.ClientSession, api_url: str, token: str, login: str
    ) -> None:
        super().__init__(session, f"sandbox-{login}", oauth_token=token, base_url=api_url)
        self.login = login

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        return await super()._request(method, url, {**headers, ACT_AS_HEADER: self.login}, body)


class Maintainer:
    """What a person with admin rights does on the sandbox: repos, issues, labels, merges.

    `as_user` gives the same client acting as another person, held to that person's
    role on each repository (`grant` one), as GitHub holds them.
    """

    def __init__(
        self, session: aiohttp.ClientSession, api_url: str, token: str, login: str | None = None
    ) -> None:
        self.gh = (
            GitHubAPI(session, "baton-maintainer", oauth_token=token, base_url=api_url)
            if login is None
            else _ActingAs(session, api_url, token, login)
        )
        self.session, self.api_url = session, api_url
        self.token = token
        self.login = login or ADMIN_LOGIN
        self.git = Git(Identity("Sandbox Maintainer", "maintainer@sandbox.invalid"))

    def as_user(self, login: str) -> Maintainer:
        """Return a client that does everything as login: issues, comments, labels, reviews."""
        return Maintainer(self.session, self.api_url, self.token, login)

    async def create_repo(
        self, name: str, files: Mapping[str, str], workdir: Path, private: bool = False
    ) -> dict[str, Any]:
        """Create a repository and push files to its main branch as the first commit."""
        body = {"name": name, "private": private}
        repo: dict[str, Any] = await self.gh.post("/user/repos", data=body)
        seed = workdir / f"seed-{name}"
        seed.mkdir(parents=True)
        for path, text in files.items():
            target = seed / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            if path.startswith(".sandbox/"):
                target.chmod(0o755)
        await self.git.run(seed, "init", "--quiet", "--initial-branch=main")
        await self.git.run(seed, "add", "--all")
        await self.git.run(seed, "commit", "--quiet", "-m", "Initial commit")
        await self.git.run(seed, "push", "--quiet", repo["clone_url"], "main", token=self.token)
        return repo

    async def push_to_main(
        self, full_name: str, files: Mapping[str, str], workdir: Path, message: str
    ) -> None:
        """Commit files on top of a repository made by create_repo in workdir, and push main."""
        repo: dict[str, Any] = await self.gh.getitem("/repos/{+repo}", {"repo": full_name})
        seed = workdir / f"seed-{repo['name']}"
        await self.git.run(
            seed, "pull", "--quiet", "--ff-only", repo["clone_url"], "main", token=self.token
        )
        for path, text in files.items():
            (seed / path).parent.mkdir(parents=True, exist_ok=True)
            (seed / path).write_text(text)
        await self.git.run(seed, "add", "--all")
        await self.git.run(seed, "commit", "--quiet", "-m", message)
        await self.git.run(seed, "push", "--quiet", repo["clone_url"], "main", token=self.token)

    async def delete_branch(self, repo: str, branch: str) -> None:
        """Delete a branch (GitHub closes the pull requests it heads)."""
        await self.gh.delete(
            "/repos/{+repo}/git/refs/heads/{branch}", {"repo": repo, "branch": branch}
        )

    async def set_webhook_url(self, url: str | None) -> None:
        """Point the sandbox's webhooks elsewhere (None: deliver nowhere, as in an outage)."""
        await self.gh.patch("/_sandbox/config", data={"webhook_url": url})

    async def delete_issue(self, repo: str, number: int) -> None:
        """Delete an issue (GitHub answers 410 Gone for it afterwards; issues.deleted)."""
        await self.gh.delete(
            "/_sandbox/repos/{+repo}/issues/{number}", {"repo": repo, "number": number}
        )

    async def transfer_issue(self, repo: str, number: int, to: str) -> dict[str, Any]:
        """Move an issue to the owner's repository `to`; return it under its new number."""
        moved: dict[str, Any] = await self.gh.post(
            "/_sandbox/repos/{+repo}/issues/{number}/transfer",
            {"repo": repo, "number": number},
            data={"repository": to},
        )
        return moved

    async def rename_repo(self, repo: str, name: str) -> dict[str, Any]:
        """Rename a repository (its former name redirects to the new one)."""
        renamed: dict[str, Any] = await self.gh.patch(
            "/_sandbox/repos/{+repo}", {"repo": repo}, data={"name": name}
        )
        return renamed

    async def delete_repo(self, repo: str) -> None:
        """Delete a repository."""
        await self.gh.delete("/_sandbox/repos/{+repo}", {"repo": repo})

    async def suspend_installation(self, installation_id: int, suspended: bool = True) -> None:
        """Suspend an App's installation (or, suspended=False, lift its suspension)."""
        url = "/_sandbox/installations/{id}/suspended"
        if suspended:
            await self.gh.put(url, {"id": installation_id}, data={})
        else:
            await self.gh.delete(url, {"id": installation_id})

    async def install(self, account: str) -> int:
        """Install Baton's App on another account; return the installation's id."""
        made = await self.gh.post("/_sandbox/installations", data={"account": account})
        return int(made["id"])

    async def fork(self, repo: str, organization: str) -> dict[str, Any]:
        """Fork a repository to an account, as `gh repo fork --org` does; return the fork."""
        made: dict[str, Any] = await self.gh.post(
            "/repos/{+repo}/forks", {"repo": repo}, data={"organization": organization}
        )
        return made

    async def set_fork_approval(self, repo: str, policy: str) -> None:
        """Choose whose pull requests from forks wait for approval before CI runs."""
        await self.gh.put(
            "/repos/{+repo}/actions/permissions/fork-pr-contributor-approval",
            {"repo": repo},
            data={"approval_policy": policy},
        )

    async def approve_workflows(self, repo: str, number: int) -> None:
        """Press "Approve and run workflows" on a pull request from a fork."""
        await self.gh.post(
            "/_sandbox/repos/{+repo}/pulls/{number}/approve-workflows",
            {"repo": repo, "number": number},
            data={},
        )

    async def uninstall(self, installation_id: int) -> None:
        """Remove the App from an account (GitHub sends installation.deleted)."""
        await self.gh.delete("/_sandbox/installations/{id}", {"id": installation_id})

    async def set_rate_limit(self, limit: int) -> None:
        """Give every installation `limit` requests an hour (GitHub's default is 5,000)."""
        await self.gh.patch("/_sandbox/config", data={"rate_limit": limit})

    async def reset_rate_limits(self) -> None:
        """Give every installation and App its whole rate limit back."""
        await self.gh.delete("/_sandbox/rate-limits")

    async def delay_fresh_tokens(self, seconds: float) -> None:
        """Refuse installation tokens for their first `seconds` (0: accept them at once)."""
        await self.gh.post("/_sandbox/faults", data={"fresh_token_seconds": seconds})

    async def open_issue(self, repo: str, title: str, body: str) -> dict[str, Any]:
        """Open an issue."""
        issue: dict[str, Any] = await self.gh.post(
            "/repos/{+repo}/issues", {"repo": repo}, data={"title": title, "body": body}
        )
        return issue

    async def edit_issue(
        self, repo: str, number: int, *, title: str | None = None, body: str | None = None
    ) -> dict[str, Any]:
        """Change an issue's title or body (GitHub sends issues.edited, saying what changed)."""
        changes = {"title": title, "body": body}
        issue: dict[str, Any] = await self.gh.patch(
            "/repos/{+repo}/issues/{number}",
            {"repo": repo, "number": number},
            data={name: value for name, value in changes.items() if value is not None},
        )
        return issue

    async def add_label(self, repo: str, number: int, label: str) -> None:
        """Put a label on an issue (GitHub sends issues.labeled)."""
        await self.gh.post(
            "/repos/{+repo}/issues/{number}/labels",
            {"repo": repo, "number": number},
            data={"labels": [label]},
        )

    async def remove_label(self, repo: str, number: int, label: str) -> None:
        """Take a label off an issue (GitHub sends issues.unlabeled)."""
        await self.gh.delete(
            "/repos/{+repo}/issues/{number}/labels/{name}",
            {"repo": repo, "number": number, "name": label},
        )

    async def set_secret(self, repo: str, name: str, value: str) -> None:
        """Give a repository an Actions secret, which its CI runs get in their environment."""
        await self.gh.put(
            "/_sandbox/repos/{+repo}/secrets/{name}",
            {"repo": repo, "name": name},
            data={"value": value},
        )

    async def grant(self, repo: str, login: str, permission: str) -> None:
        """Give a user a role on a repository (read, triage, write, maintain, admin)."""
        await self.gh.put(
            "/_sandbox/repos/{+repo}/collaborators/{login}",
            {"repo": repo, "login": login},
            data={"permission": permission},
        )

    async def comment(
        self, repo: str, number: int, body: str, as_user: str | None = None
    ) -> dict[str, Any]:
        """Comment on an issue or pull request, as the maintainer or as another user."""
        comment: dict[str, Any] = await self.gh.post(
            "/repos/{+repo}/issues/{number}/comments",
            {"repo": repo, "number": number},
            data={"body": body},
            extra_headers={ACT_AS_HEADER: as_user} if as_user else None,
        )
        return comment

    async def review(
        self,
        repo: str,
        pull: int,
        event: str,
        body: str,
        comments: Sequence[Mapping[str, object]] = (),
    ) -> dict[str, Any]:
        """Submit a review of a pull request (APPROVE, REQUEST_CHANGES or COMMENT)."""
        review: dict[str, Any] = await self.gh.post(
            "/repos/{+repo}/pulls/{number}/reviews",
            {"repo": repo, "number": pull},
            data={"event": event, "body": body, "comments": list(comments)},
        )
        return review

    async def issue_events(self, repo: str, number: int) -> list[dict[str, Any]]:
        """Return what happened to an issue (labels added and taken off, closes), oldest first."""
        return [
            event
            async for event in self.gh.getiter(
                "/repos/{+repo}/issues/{number}/events", {"repo": repo, "number": number}
            )
        ]

    async def reactions(self, repo: str, comment_id: int) -> list[str]:
        """Return the reactions on a comment, by content."""
        found = await self.gh.getitem(
            "/repos/{+repo}/issues/comments/{id}/reactions", {"repo": repo, "id": comment_id}
        )
        return [str(reaction["content"]) for reaction in found]

    async def labels(self, repo: str, number: int) -> set[str]:
        """Return the labels on an issue."""
        issue = await self.gh.getitem(
            "/repos/{+repo}/issues/{number}", {"repo": repo, "number": number}
        )
        return {str(label["name"]) for label in issue["labels"]}

    async def issue(self, repo: str, number: int) -> dict[str, Any]:
        """Return an issue."""
        data: dict[str, Any] = await self.gh.getitem(
            "/repos/{+repo}/issues/{number}", {"repo": repo, "number": number}
        )
        return data

    async def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        """Return an issue's comments."""
        return [
            comment
            async for comment in self.gh.getiter(
                "/repos/{+repo}/issues/{number}/comments", {"repo": repo, "number": number}
            )
        ]

    async def pulls(self, repo: str, state: str = "all") -> list[dict[str, Any]]:
        """Return the repository's pull requests."""
        return [
            pr
            async for pr in self.gh.getiter(
                "/repos/{+repo}/pulls{?state}", {"repo": repo, "state": state}
            )
        ]

    async def pull(self, repo: str, number: int) -> dict[str, Any]:
        """Return a pull request (`mergeable` is null until GitHub has computed it)."""
        data: dict[str, Any] = await self.gh.getitem(
            "/repos/{+repo}/pulls/{number}", {"repo": repo, "number": number}
        )
        return data

    async def rerequest_check_run(self, repo: str, run_id: int) -> None:
        """Click "Re-run" on a completed check run (its App gets check_run.rerequested).

        Needs write access to the repository, as on GitHub.
        """
        await self.gh.post(
            "/_sandbox/repos/{+repo}/check-runs/{id}/rerequest",
            {"repo": repo, "id": run_id},
            data={},
        )

    async def rerequest_check_suite(self, repo: str, suite_id: int) -> None:
        """Click "Re-run all checks" of a completed suite (its App gets check_suite.rerequested).

        Needs write access to the repository, as on GitHub.
        """
        await self.gh.post(
            "/_sandbox/repos/{+repo}/check-suites/{id}/rerequest",
            {"repo": repo, "id": suite_id},
            data={},
        )

    async def install_app(self, slug: str, account: str) -> None:
        """Install another of the sandbox's Apps, such as its linter (`sandbox-lint`), on an
        account: it gets a check suite on every push and never starts a run in it."""
        await self.gh.put(
            "/_sandbox/apps/{slug}/installations/{account}",
            {"slug": slug, "account": account},
            data={},
        )

    async def set_plan(self, account: str, plan: str) -> None:
        """Put an account on a GitHub plan: `free` (where it starts), `pro`, `team`, ..."""
        await self.gh.put("/_sandbox/users/{login}/plan", {"login": account}, data={"plan": plan})

    async def merge(self, repo: str, number: int) -> dict[str, Any]:
        """Merge a pull request."""
        result: dict[str, Any] = await self.gh.put(
            "/repos/{+repo}/pulls/{number}/merge", {"repo": repo, "number": number}, data={}
        )
        return result


async def eventually(
    probe: Callable[[], Awaitable[T | None]], what: str, within: float = 60.0
) -> T:
    """Poll probe until it returns something other than None/False; raise naming what."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not seen within {within:.0f}s")
        await asyncio.sleep(0.1)
