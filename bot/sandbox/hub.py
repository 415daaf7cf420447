"""The sandbox GitHub itself: state, accounts, repositories, access rules and event emission."""

from __future__ import annotations

import asyncio
import pathlib
import random
from collections import defaultdict
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from aiohttp import web

from bot.domain.manifest import AppManifest
from bot.sandbox.auth import (
    ADMIN_LOGIN,
    APP_CLIENT_ID,
    APP_ID,
    APP_NAME,
    APP_SLUG,
    BOT_LOGIN,
    CI_APP_ID,
    CI_APP_NAME,
    CI_APP_SLUG,
    CI_BOT_LOGIN,
    CI_CLIENT_ID,
    DEFAULT_TOKEN_LIFETIME_S,
    LINT_APP_ID,
    LINT_APP_NAME,
    LINT_APP_SLUG,
    LINT_CLIENT_ID,
    Actor,
    Authenticator,
    load_or_create_key,
)
from bot.sandbox.calls import CallCounter, RateLimits
from bot.sandbox.faults import Faults
from bot.sandbox.git_backend import GitRepo, Identity
from bot.sandbox.render import AppFacts, Render
from bot.sandbox.rest import (
    ApiError,
    Json,
    bad_credentials,
    forbidden_integration,
    moved,
    not_found,
    or_not_found,
)
from bot.sandbox.secondary import SecondaryLimits
from bot.sandbox.state import Installation, Repo, StateFile, User, UserType, node_id, utc_now
from bot.sandbox.webhooks import WebhookSender

# A person's roles on a repository, weakest first: read comments and reviews, triage
# labels, closes and reopens, write pushes and merges (and edits what others wrote).
ROLES = ("read", "triage", "write", "maintain", "admin")
DEFAULT_CI_TIMEOUT = 300.0
CI_CONCURRENCY = 2
# Rewriting the whole state costs milliseconds per megabyte, so a burst of mutations
# shares one write; a clean shutdown writes at once.
SAVE_DELAY = 0.2
CI_APP_PERMISSIONS = {"checks": "write", "contents": "read", "metadata": "read"}
CI_APP_EVENTS = ["check_run", "check_suite", "push"]
LINT_APP_PERMISSIONS = {"checks": "write", "contents": "read", "metadata": "read"}
LINT_APP_EVENTS = ["check_suite"]


class Hub:
    """One sandbox GitHub instance, rooted at a data directory.

    Its own App, Baton, has the permissions and events of the manifest it is given
    (app.yml by default), and so does every token minted for Baton's installations.
    """

    def __init__(
        self,
        data_dir: pathlib.Path,
        public_url: str,
        webhook_url: str | None,
        manifest: AppManifest,
        ci_timeout: float = DEFAULT_CI_TIMEOUT,
        token_lifetime_s: float = DEFAULT_TOKEN_LIFETIME_S,
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.public_url = public_url.rstrip("/")
        self.git_root = data_dir / "git"
        self.key_path = data_dir / "app-private-key.pem"
        self.store = StateFile(data_dir / "state.json")
        self.state = self.store.load()
        self.permissions = dict(manifest.default_permissions)
        self.events = list(manifest.default_events)
        # Every App has its bot account from the start.
        for slug in (APP_SLUG, CI_APP_SLUG, LINT_APP_SLUG):
            self.user(f"{slug}[bot]")
        self.rng = random.Random(0)  # noqa: S311 - seeded on purpose: injected faults must repeat
        self.faults = Faults(self.rng)
        self.auth = Authenticator(
            self.state,
            load_or_create_key(self.key_path),
            self.permissions,
            self.faults,
            token_lifetime_s,
        )
        self.calls = CallCounter()
        self.limits = RateLimits()
        self.secondary = SecondaryLimits()
        self.webhooks = WebhookSender(
            data_dir, self.state.secrets.webhook_secret, webhook_url, self.rng
        )
        self.render = Render(
            self.public_url, self.user, self.app_facts, self.installations_of, self.repo_by_id
        )
        self.ci_timeout = ci_timeout
        self.ci_slots = asyncio.Semaphore(CI_CONCURRENCY)
        self.tasks: set[asyncio.Task[None]] = set()
        self._locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._pending_save: asyncio.TimerHandle | None = None
        self.user(ADMIN_LOGIN)
        self.user(BOT_LOGIN)
        self.user(CI_BOT_LOGIN)
        self.save()

    def save(self) -> None:
        """Write the state to disk now."""
        if self._pending_save is not None:
            self._pending_save.cancel()
            self._pending_save = None
        self.store.save(self.state)

    def changed(self) -> None:
        """Note a mutation: the state is written within SAVE_DELAY, one write for a burst."""
        if self._pending_save is None:
            self._pending_save = asyncio.get_running_loop().call_later(SAVE_DELAY, self.save)

    def settings(self) -> dict[str, str]:
        """Return what a Baton process needs to talk to this sandbox (app.env)."""
        return {
            "GITHUB_API_URL": self.public_url,
            "GITHUB_APP_ID": str(APP_ID),
            "GITHUB_PRIVATE_KEY_PATH": str(self.key_path),
            "GITHUB_WEBHOOK_SECRET": self.state.secrets.webhook_secret,
            "SANDBOX_ADMIN_TOKEN": self.state.secrets.admin_token,
        }

    def user(self, login: str) -> User:
        """Return an account, creating it on first mention (every login exists here)."""
        found = self.state.users.get(login)
        if found is None:
            kind: UserType = "Bot" if login.endswith("[bot]") else "User"
            found = self.state.users[login] = User(login=login, id=self.state.next_id(), type=kind)
        return found

    def identity(self, login: str) -> Identity:
        """Return the git identity GitHub records for a user's web commits."""
        return Identity(login, f"{self.user(login).id}+{login}@users.noreply.{self.render.host}")

    def repo(self, owner: str, name: str) -> Repo | None:
        """Find a repository by owner and name (case-insensitively, as GitHub does)."""
        wanted = f"{owner}/{name}".casefold()
        return next((r for r in self.state.repos if r.full_name.casefold() == wanted), None)

    def repo_by_id(self, repo_id: int) -> Repo | None:
        """Find a repository by its id."""
        return next((r for r in self.state.repos if r.id == repo_id), None)

    def renamed_repo(self, owner: str, name: str) -> Repo | None:
        """Find the repository a former name now belongs to, if it was renamed."""
        repo_id = self.state.renamed.get(f"{owner}/{name}".casefold())
        return next((r for r in self.state.repos if r.id == repo_id), None)

    def git(self, repo: Repo) -> GitRepo:
        """Return the bare repository behind a repository."""
        return GitRepo(self.git_root / repo.owner / f"{repo.name}.git")

    def lock(self, repo: Repo) -> asyncio.Lock:
        """Return the lock that serializes ref changes of a repository."""
        return self._locks[repo.id]

    def app_facts(self, app_id: int) -> AppFacts:
        """Describe an App: Baton, the sandbox's CI or linter, or one registered from a manifest."""
        created = self.state.secrets.created_at
        built_in: dict[int, tuple[str, str, str, Mapping[str, str], Sequence[str]]] = {
            APP_ID: (APP_CLIENT_ID, APP_SLUG, APP_NAME, self.permissions, self.events),
            CI_APP_ID: (CI_CLIENT_ID, CI_APP_SLUG, CI_APP_NAME, CI_APP_PERMISSIONS, CI_APP_EVENTS),
            LINT_APP_ID: (
                LINT_CLIENT_ID,
                LINT_APP_SLUG,
                LINT_APP_NAME,
                LINT_APP_PERMISSIONS,
                LINT_APP_EVENTS,
            ),
        }
        if app_id in built_in:
            client_id, slug, name, permissions, events = built_in[app_id]
            return AppFacts(
                app_id,
                client_id,
                slug,
                name,
                ADMIN_LOGIN,
                f"{name} (sandbox GitHub)",
                self.public_url,
                permissions,
                events,
                created,
            )
        app = or_not_found(next((a for a in self.state.apps if a.id == app_id), None))
        return AppFacts(
            app.id,
            app.client_id,
            app.slug,
            app.name,
            app.owner,
            app.description or "",
            app.url,
            app.permissions,
            app.events,
            app.created_at,
        )

    def installations_of(self, app_id: int) -> list[Installation]:
        """Return an App's installations."""
        return [i for i in self.state.installations if i.app_id == app_id]

    def installation(self, account: str, app_id: int = APP_ID) -> Installation | None:
        """Return an App's installation on an account."""
        return next((i for i in self.installations_of(app_id) if i.account == account), None)

    def ensure_installation(self, account: str, app_id: int = APP_ID) -> Installation:
        """Install an App on an account if it is not yet installed."""
        found = self.installation(account, app_id)
        if found is None:
            found = Installation(
                id=self.state.next_installation_id(),
                account=account,
                created_at=utc_now(),
                app_id=app_id,
            )
            self.state.installations.append(found)
        return found

    def checks_apps(self, account: str) -> list[int]:
        """Return the Apps installed on an account, not suspended, that may write checks."""
        return [
            inst.app_id
            for inst in self.state.installations
            if inst.account == account
            and inst.suspended_at is None
            and self.app_facts(inst.app_id).permissions.get("checks") == "write"
        ]

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a background task the hub keeps track of (and cancels on shutdown)."""
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        """Stop background work and persist the state."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.webhooks.close()
        self.save()

    def emit(
        self, repo: Repo, event: str, sender: str, body: Json, action: str | None = None
    ) -> None:
        """Send a webhook about a repository to the App, as GitHub would.

        None goes to an account the App is not installed on, or whose installation is
        suspended: "the GitHub App cannot access the GitHub API or webhook events for that
        installation" while it is.
        """
        inst = self.installation(repo.owner)
        if inst is None or inst.suspended_at is not None:
            return
        payload: Json = {"action": action} if action is not None else {}
        payload.update(body)
        payload["repository"] = self.render.repo(repo, webhook=True, push=event == "push")
        payload["sender"] = self.render.user(sender)
        payload["installation"] = {"id": inst.id, "node_id": node_id("Installation", inst.id)}
        self.webhooks.enqueue(repo.full_name, event, payload, repo.id, inst.id)

    def emit_installation(self, inst: Installation, action: str, sender: str) -> None:
        """Send an `installation` webhook, which GitHub delivers to every App it concerns."""
        repositories = [
            {
                "id": r.id,
                "node_id": node_id("Repository", r.id),
                "name": r.name,
                "full_name": r.full_name,
                "private": r.private,
            }
            for r in self.state.repos
            if r.owner == inst.account
        ]
        payload: Json = {
            "action": action,
            "installation": self.render.installation(inst),
            "repositories": repositories,
            "sender": self.render.user(sender),
        }
        if action != "created":  # GitHub's `created` has no requester field at all
            payload["requester"] = None
        self.webhooks.enqueue(f"installation/{inst.id}", "installation", payload, None, inst.id)

    def repo_for(self, actor: Actor | None, owner: str, name: str, write: bool) -> Repo:
        """Find a repository the actor may read (or write), answering like GitHub otherwise."""
        if actor is None:
            raise bad_credentials()
        if actor.kind == "app":
            raise forbidden_integration()
        repo = or_not_found(self.repo(owner, name))
        if actor.kind == "installation" and not self._covers(actor, repo):
            if repo.private:
                raise not_found()
            if write:
                raise forbidden_integration()
        return repo

    def role(self, repo: Repo, login: str) -> str:
        """Return a user's role on a repository: the owner and the admin are admins."""
        if login in (repo.owner, ADMIN_LOGIN):
            return "admin"
        return repo.collaborators.get(login, "read")

    def has_role(self, actor: Actor | None, repo: Repo, needed: str) -> bool:
        """Tell whether the caller holds at least a role; an App is held to its permissions."""
        if actor is None or actor.kind != "admin" or actor.login is None:
            return True
        return ROLES.index(self.role(repo, actor.login)) >= ROLES.index(needed)

    def require_role(self, actor: Actor | None, repo: Repo, needed: str, what: str) -> None:
        """Refuse a person whose role on the repository is below needed, as GitHub does."""
        if not self.has_role(actor, repo, needed):
            raise ApiError(403, f"Must have {needed} access to {what}.")

    def _covers(self, actor: Actor, repo: Repo) -> bool:
        inst = self.installation(repo.owner)
        if inst is None or inst.id != actor.installation_id:
            return False
        return actor.repository_ids is None or repo.id in actor.repository_ids


HUB: web.AppKey[Hub] = web.AppKey("hub", Hub)
ACTOR: web.RequestKey[Actor | None] = web.RequestKey("actor")


def hub_of(request: web.Request) -> Hub:
    """Return the hub serving a request."""
    return request.app[HUB]


def actor_of(request: web.Request) -> Actor | None:
    """Return the authenticated caller of a request (set by the API middleware)."""
    return request.get(ACTOR)


def login_of(request: web.Request) -> str:
    """Return the login acting in a request; only valid after a repo_for check."""
    actor = actor_of(request)
    assert actor is not None and actor.login is not None
    return actor.login


def repo_of(request: web.Request, write: bool = False) -> Repo:
    """Return the repository named in the request path, checking access.

    A renamed repository's former name redirects to its new one, as GitHub redirects it,
    for callers who may read it (others get 404).
    """
    hub = hub_of(request)
    actor = actor_of(request)
    owner, name = request.match_info["owner"], request.match_info["repo"]
    renamed = hub.renamed_repo(owner, name) if hub.repo(owner, name) is None else None
    if renamed is not None:
        hub.repo_for(actor, renamed.owner, renamed.name, write=False)
        _, _, _, _, rest = (request.rel_url.raw_path + "/").split("/", 4)
        path = f"/repos/{renamed.full_name}/{rest}".rstrip("/")
        query = request.rel_url.raw_query_string
        raise moved(request.method, hub.public_url + path + (f"?{query}" if query else ""))
    return hub.repo_for(actor, owner, name, write)


def require_role(request: web.Request, repo: Repo, needed: str, what: str) -> None:
    """Refuse the person acting in a request unless they hold at least a role on repo."""
    hub_of(request).require_role(actor_of(request), repo, needed, what)


def has_role(request: web.Request, repo: Repo, needed: str) -> bool:
    """Tell whether the person acting in a request holds at least a role on repo."""
    return hub_of(request).has_role(actor_of(request), repo, needed)
