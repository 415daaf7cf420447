"""Every Redis key Baton uses, and the members of its indexes: built here and nowhere else.

The strings are what deployments already hold: changing one orphans that data.
`{issue}` stands for `baton:issue:{repo}:{number}`; `{h(x)}` for the first 32 hex
digits of x's SHA-256. Store names the module of this package whose class owns the
key. RQ's own keys (`rq:...`) are RQ's and not listed.

| Built by              | Key                                      | Type   | Store       | TTL    |
| --------------------- | ---------------------------------------- | ------ | ----------- | ------ |
| `INTAKE_STREAM`       | baton:intake                             | stream | intake      | none   |
| `delivery`            | baton:delivery:{delivery_id}             | string | intake      | 7 d    |
| `redelivery_asked`    | baton:redelivery-asked:{guid}            | string | intake      | 7 d    |
| `REDELIVERY_PASS`     | baton:redelivery-pass                    | string | intake      | none   |
| `lock`                | {issue}:lock                             | string | runs        | lock   |
| `fence`               | {issue}:fence                            | string | runs        | 90 d   |
| `CLAIMS`              | baton:claims                             | zset   | runs        | none   |
| `attempts`            | {issue}:attempts                         | string | runs        | 90 d   |
| `run`, `recent_run`   | {issue}:run:{attempt}                    | string | runs        | 90 d   |
| `RECENT_RUNS`         | baton:runs:recent                        | zset   | runs        | none   |
| `head`                | baton:head:{repo}:{sha}                  | string | runs        | 90 d   |
| `head_runs`           | baton:head-runs:{repo}:{sha}             | hash   | runs        | 90 d   |
| `pull`                | baton:pull:{repo}:{pr}                   | string | runs        | 90 d   |
| `IN_FLIGHT`           | baton:in-flight                          | zset   | runs        | none   |
| `open_pulls`          | baton:open-pulls:{repo}                  | hash   | runs        | 90 d   |
| `checkpoint`          | {issue}:checkpoint:{attempt}             | string | runs        | 90 d   |
| `salvage`             | {issue}:salvage                          | hash   | runs        | 8 d    |
| `owed_replays`        | {issue}:owed-replays:{attempt}           | string | runs        | 7 d    |
| `owed_pause`          | {issue}:owed-pause:{attempt}             | string | runs        | pause  |
| `recovering`          | {issue}:recovering:{attempt}             | string | runs        | lock   |
| `checked`             | baton:checked:{repo}:{sha}               | string | runs        | 90 d   |
| `settling`            | baton:settling:{repo}:{sha}              | string | runs        | 120 s  |
| `desired_label`       | {issue}:desired-label                    | string | issue_state | 90 d   |
| `label_set`           | {issue}:label-set                        | string | issue_state | 90 d   |
| `label_applied`       | {issue}:label-applied                    | string | issue_state | 90 d   |
| `label_removals`      | {issue}:label-removals                   | set    | issue_state | 90 d   |
| `status_comment`      | {issue}:status-comment                   | string | issue_state | 90 d   |
| `pull_status_comment` | baton:pull:{repo}:{pr}:status-comment    | string | issue_state | 90 d   |
| `comment_said`        | baton:comment:{repo}:{id}:said           | string | issue_state | 90 d   |
| `check_run`           | baton:check-run:{repo}:{sha}             | string | issue_state | 90 d   |
| `draft_pull`          | baton:pull:{repo}:{pr}:draft             | string | issue_state | 90 d   |
| `comment_lock`        | {issue}:comment-lock                     | string | issue_state | 15 s   |
| `status_turns`        | {issue}:status-turns                     | string | issue_state | 1 d    |
| `escalated`           | {issue}:escalated:{attempt}:{reason}     | string | issue_state | 90 d   |
| `withdrawn`           | {issue}:withdrawn                        | string | issue_state | 90 d   |
| `stop`                | {issue}:stop                             | string | issue_state | 1 h    |
| `queued_text`         | {issue}:queued-text                      | string | issue_state | 90 d   |
| `queue_refused`       | {issue}:queue-refused                    | string | issue_state | 90 d   |
| `config_error`        | {issue}:config-error:{blob_sha}          | string | issue_state | 90 d   |
| `command`             | baton:command:{repo}:{id}                | string | issue_state | 90 d   |
| `review`              | baton:review:{repo}:{id}                 | string | issue_state | 90 d   |
| `rerun`               | baton:rerun:{repo}:{delivery_id}         | string | issue_state | 90 d   |
| `chain`               | baton:chain:{chain_id}                   | string | chains      | 90 d   |
| `chain_generation`    | baton:chain-generation:{chain_id}        | string | chains      | 90 d   |
| `CHAINS`              | baton:chains                             | zset   | chains      | none   |
| `issue_chain`         | {issue}:chain                            | string | chains      | 90 d   |
| `chain_lock`          | baton:chain-lock:{chain_id}              | string | chains      | 300 s  |
| `window`              | baton:window:{account}                   | string | gates       | reopen |
| `window_claims`       | baton:window-claims:{account}            | hash   | gates       | 7 d    |
| `slots`               | baton:slots:{repo}                       | zset   | gates       | lock   |
| `WAITING`             | baton:waiting                            | zset   | gates       | none   |
| `HALTED`              | baton:halted                             | zset   | gates       | none   |
| `PAUSED`              | baton:paused                             | hash   | gates       | none   |
| `held`                | baton:held:{repo}                        | hash   | gates       | none   |
| `held_settled`        | baton:held-settled:{repo}                | string | gates       | none   |
| `extra_continuations` | {issue}:extra-continuations              | string | gates       | 90 d   |
| `SWEEP_LEASE`         | baton:sweep-lease                        | string | gates       | caller |
| `BOT_LOGIN`           | baton:app:bot-login                      | string | caches      | none   |
| `BOT_USER_ID`         | baton:app:bot-user-id                    | string | caches      | none   |
| `app_id`              | baton:app:{app}:id                       | string | caches      | none   |
| `installation_token`  | baton:app:{app}:installation:{id}:token  | string | caches      | caller |
| `rate_limits`         | baton:app:{app}:rate-limits              | hash   | caches      | 7 d    |
| `secondary_stop`      | baton:app:{app}:installation:{id}:stop   | string | caches      | stop   |
| `secondary_limits`    | baton:app:{app}:installation:{id}:limits | string | caches      | calm   |
| `write_slots`         | baton:app:{app}:installation:{id}:writes | zset   | caches      | 1 h    |
| `conditional_read`    | baton:etag:{scope}:{h(url)}              | string | caches      | 1 d    |
| `role`                | baton:role:{repo}:{login}                | string | caches      | 60 s   |
| `notice`              | baton:notice:{h(what)}                   | string | caches      | 1 d    |
| `QUEUE_LABELS`        | baton:queue-labels                       | hash   | caches      | none   |
| `config_seen`         | baton:config-seen:{repo}                 | string | caches      | 1 h    |
| `repo_seen`           | baton:repo-seen:{repo}                   | string | caches      | 1 h    |
| `repo_config`         | baton:config:{repo}:{blob_sha}           | string | caches      | 90 d   |
| `LAST`                | baton:last                               | hash   | metrics     | none   |
| `metric`              | baton:metrics:{name}                     | hash   | metrics     | none   |
| `UNCONTAINED`         | baton:workers:uncontained                | zset   | metrics     | none   |
| `spend_day`           | baton:spend:{day}                        | hash   | spend       | 40 d   |
| `spent`               | {issue}:spent:{attempt}                  | string | spend       | 40 d   |
| `SPEND_BUDGETS`       | baton:spend-budgets                      | hash   | spend       | none   |
| `transcript`          | {issue}:transcript:{attempt}             | string | transcripts | days   |

TTL: `lock` is the claim's lock TTL (`Store.lock_ttl_ms`), renewed by each heartbeat
or slot taken; `caller` is the TTL the writer passes (a token's: less than its life;
the sweep's lease); `reopen` is the instant the usage window reopens (PXAT). 90 d is
`RUN_TTL_S`: what Baton keeps of an issue goes with its runs. 40 d is `SPEND_TTL_S`:
the budgets' rolling 30 days, and some to spare. `days` is `BATON_TRANSCRIPT_DAYS`.
`stop` is the instant a secondary rate limit lifts (PXAT); `calm` is an hour past it.
`pause` doubles with each replay of an owed recovery, from a minute up to six hours.
A key without a TTL stays bounded another way:

- `INTAKE_STREAM`: entries are deleted as forwarded; trimmed near `INTAKE_MAXLEN`.
- `REDELIVERY_PASS`: one value, the last pass, rewritten by each.
- `CLAIMS`: a claim leaves it on release, or once its takeover is done.
- `RECENT_RUNS`: trimmed to the newest `RECENT_RUNS_KEPT` runs at every run write.
- `IN_FLIGHT`, `WAITING`, `HALTED`: an issue leaves as it moves on or is forgotten.
- `CHAINS`: entries older than `RUN_TTL_S` are dropped at every chain saved.
- `PAUSED`, `held`, `held_settled`: deleted as the repository is resumed.
- `BOT_LOGIN`, `BOT_USER_ID`, `app_id`: one value for the deployment (for the App), rewritten
  as learnt.
- `QUEUE_LABELS`: one field per repository with a queue label of its own.
- `LAST`, `metric`: one field per thing marked or metric label set: a bounded set.
- `UNCONTAINED`: workers scored by when their report lapses; lapsed ones are dropped
  at every read.
- `SPEND_BUDGETS`: one field per repository whose file sets a budget of its own.

The members of the sorted sets, which name issues or runs rather than keys (the issue
indexes are `CLAIMS`, `IN_FLIGHT`, `WAITING` and `HALTED`):

| Built by           | Member                            | In            |
| ------------------ | --------------------------------- | ------------- |
| `indexed_issue`    | {installation_id}:{repo}:{number} | issue indexes |
| `issue_from_index` | (reads an issue index's member)   | issue indexes |
| `recent_member`    | {repo}:{number}:run:{attempt}     | `RECENT_RUNS` |

A `RECENT_RUNS` member is its run's key past `baton:issue:`, so `recent_run` reads
the runs it lists in one MGET.
"""

from __future__ import annotations

import hashlib
from datetime import date

from bot.domain.model import IssueRef

_PREFIX = "baton"
_ISSUES = f"{_PREFIX}:issue"


def _issue(issue: IssueRef, *parts: str) -> str:
    return ":".join((_ISSUES, issue.repo, str(issue.number), *parts))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# The intake --------------------------------------------------------------------

INTAKE_STREAM = f"{_PREFIX}:intake"


def delivery(delivery_id: str) -> str:
    """Return the key recording that a webhook delivery was accepted."""
    return f"{_PREFIX}:delivery:{delivery_id}"


def redelivery_asked(guid: str) -> str:
    """Return the key recording that GitHub was asked to deliver an event again."""
    return f"{_PREFIX}:redelivery-asked:{guid}"


REDELIVERY_PASS = f"{_PREFIX}:redelivery-pass"


# Runs, claims and their indexes --------------------------------------------------

CLAIMS = f"{_PREFIX}:claims"
RECENT_RUNS = f"{_PREFIX}:runs:recent"
IN_FLIGHT = f"{_PREFIX}:in-flight"


def lock(issue: IssueRef) -> str:
    """Return the key of the issue's claim: its fencing token while held."""
    return _issue(issue, "lock")


def fence(issue: IssueRef) -> str:
    """Return the key of the issue's fencing counter."""
    return _issue(issue, "fence")


def attempts(issue: IssueRef) -> str:
    """Return the key counting the issue's attempts."""
    return _issue(issue, "attempts")


def run(issue: IssueRef, attempt: int) -> str:
    """Return the key of one run record of an issue."""
    return _issue(issue, "run", str(attempt))


def recent_member(issue: IssueRef, attempt: int) -> str:
    """Return a run's member of `RECENT_RUNS`."""
    return f"{issue.repo}:{issue.number}:run:{attempt}"


def recent_run(member: str) -> str:
    """Return the key of the run a `RECENT_RUNS` member names."""
    return f"{_ISSUES}:{member}"


def head(repo: str, sha: str) -> str:
    """Return the key naming the one run whose push produced a head, as Baton kept it until
    two issues could share a head (head_runs); read until its last such key expires."""
    return f"{_PREFIX}:head:{repo}:{sha}"


def head_runs(repo: str, sha: str) -> str:
    """Return the key of the runs whose pushes produced a head: `{installation}:{number}` to
    the attempt. Two issues' agents can push byte-identical commits: one head, two runs."""
    return f"{_PREFIX}:head-runs:{repo}:{sha}"


def pull(repo: str, number: int) -> str:
    """Return the key naming the newest run that pushed to a pull request."""
    return f"{_PREFIX}:pull:{repo}:{number}"


def open_pulls(repo: str) -> str:
    """Return the key of a repository's open pull requests of Baton's, each by its base branch."""
    return f"{_PREFIX}:open-pulls:{repo}"


def checkpoint(issue: IssueRef, attempt: int) -> str:
    """Return the key of the last checkpoint an attempt pushed."""
    return _issue(issue, "checkpoint", str(attempt))


def owed_replays(issue: IssueRef, attempt: int) -> str:
    """Return the key counting the sweep's replays of an attempt's owed recovery."""
    return _issue(issue, "owed-replays", str(attempt))


def recovering(issue: IssueRef, attempt: int) -> str:
    """Return the key of the turn to perform an attempt's recovery."""
    return _issue(issue, "recovering", str(attempt))


def owed_pause(issue: IssueRef, attempt: int) -> str:
    """Return the key that holds the sweep off an owed recovery until its next replay."""
    return _issue(issue, "owed-pause", str(attempt))


def salvage(issue: IssueRef) -> str:
    """Return the key of the issue's kept salvage: its sha and its bundle."""
    return _issue(issue, "salvage")


def transcript(issue: IssueRef, attempt: int) -> str:
    """Return the key of an attempt's kept transcript."""
    return _issue(issue, "transcript", str(attempt))


def checked(repo: str, sha: str) -> str:
    """Return the key recording that a check result for a head came in."""
    return f"{_PREFIX}:checked:{repo}:{sha}"


def settling(repo: str, sha: str) -> str:
    """Return the key of a head's settle mutex."""
    return f"{_PREFIX}:settling:{repo}:{sha}"


def indexed_issue(issue: IssueRef) -> str:
    """Return the issue's member of the issue indexes."""
    return f"{issue.installation_id}:{issue.repo}:{issue.number}"


def issue_from_index(member: str) -> IssueRef:
    """Return the issue a member of an issue index names."""
    installation, rest = member.split(":", 1)
    repo, number = rest.rsplit(":", 1)
    return IssueRef(installation_id=int(installation), repo=repo, number=int(number))


# What Baton keeps of an issue between jobs -----------------------------------------


def desired_label(issue: IssueRef) -> str:
    """Return the key of the Baton state label the issue should carry."""
    return _issue(issue, "desired-label")


def label_set(issue: IssueRef) -> str:
    """Return the key of the Baton labels recorded with the issue's desired label."""
    return _issue(issue, "label-set")


def label_applied(issue: IssueRef) -> str:
    """Return the key recording whether the desired label is on the issue."""
    return _issue(issue, "label-applied")


def label_removals(issue: IssueRef) -> str:
    """Return the key of the labels still to come off the issue."""
    return _issue(issue, "label-removals")


def status_comment(issue: IssueRef) -> str:
    """Return the key of the id of the issue's status comment."""
    return _issue(issue, "status-comment")


def pull_status_comment(repo: str, number: int) -> str:
    """Return the key of the id of a pull request's status comment."""
    return f"{pull(repo, number)}:status-comment"


def comment_said(repo: str, comment_id: int) -> str:
    """Return the key of what a status comment last said."""
    return f"{_PREFIX}:comment:{repo}:{comment_id}:said"


def check_run(repo: str, sha: str) -> str:
    """Return the key of Baton's check run on a head: its id, and what it says."""
    return f"{_PREFIX}:check-run:{repo}:{sha}"


def draft_pull(repo: str, number: int) -> str:
    """Return the key of the node id of a pull request Baton opened as a draft."""
    return f"{pull(repo, number)}:draft"


def comment_lock(issue: IssueRef) -> str:
    """Return the key of the issue's comment mutex."""
    return _issue(issue, "comment-lock")


def status_turns(issue: IssueRef) -> str:
    """Return the key counting the status edits of the issue asked for: the last is the newest."""
    return _issue(issue, "status-turns")


def escalated(issue: IssueRef, attempt: int, reason: str) -> str:
    """Return the key recording one escalation of an attempt."""
    return _issue(issue, "escalated", str(attempt), reason)


def withdrawn(issue: IssueRef) -> str:
    """Return the key of when a maintainer withdrew the issue."""
    return _issue(issue, "withdrawn")


def stop(issue: IssueRef) -> str:
    """Return the key of a request to stop the issue's run."""
    return _issue(issue, "stop")


def queued_text(issue: IssueRef) -> str:
    """Return the key of the issue's text as queued."""
    return _issue(issue, "queued-text")


def queue_refused(issue: IssueRef) -> str:
    """Return the key recording that the issue was told who may queue it."""
    return _issue(issue, "queue-refused")


def config_error(issue: IssueRef, blob_sha: str) -> str:
    """Return the key recording that the issue was told of an invalid file version."""
    return _issue(issue, "config-error", blob_sha)


def command(repo: str, comment_id: int) -> str:
    """Return the key recording that a command comment was handled."""
    return f"{_PREFIX}:command:{repo}:{comment_id}"


def review(repo: str, review_id: int) -> str:
    """Return the key recording that a review acted on a run."""
    return f"{_PREFIX}:review:{repo}:{review_id}"


def rerun(repo: str, delivery_id: str) -> str:
    """Return the key recording that a re-run of Baton's check run was handled."""
    return f"{_PREFIX}:rerun:{repo}:{delivery_id}"


# Chains ---------------------------------------------------------------------------

CHAINS = f"{_PREFIX}:chains"


def chain(chain_id: str) -> str:
    """Return the key of a chain's record."""
    return f"{_PREFIX}:chain:{chain_id}"


def chain_generation(chain_id: str) -> str:
    """Return the key counting how often a chain was queued."""
    return f"{_PREFIX}:chain-generation:{chain_id}"


def issue_chain(issue: IssueRef) -> str:
    """Return the key of the id of the chain the issue belongs to."""
    return _issue(issue, "chain")


def chain_lock(chain_id: str) -> str:
    """Return the key of a chain's mutex."""
    return f"{_PREFIX}:chain-lock:{chain_id}"


# Gates: what may start now ----------------------------------------------------------

WAITING = f"{_PREFIX}:waiting"
HALTED = f"{_PREFIX}:halted"
PAUSED = f"{_PREFIX}:paused"
SWEEP_LEASE = f"{_PREFIX}:sweep-lease"


def window(account: str) -> str:
    """Return the key of when a provider account's usage window reopens."""
    return f"{_PREFIX}:window:{account}"


def window_claims(account: str) -> str:
    """Return the key of the issues whose runs said the account's window is shut, to when."""
    return f"{_PREFIX}:window-claims:{account}"


def slots(repo: str) -> str:
    """Return the key of a repository's run slots."""
    return f"{_PREFIX}:slots:{repo}"


def held(repo: str) -> str:
    """Return the key of the starts a repository's pause holds."""
    return f"{_PREFIX}:held:{repo}"


def held_settled(repo: str) -> str:
    """Return the key counting settlements made while a repository is paused."""
    return f"{_PREFIX}:held-settled:{repo}"


def extra_continuations(issue: IssueRef) -> str:
    """Return the key of the continuations maintainers granted the issue."""
    return _issue(issue, "extra-continuations")


# Caches and facts Baton learnt -------------------------------------------------------

BOT_LOGIN = f"{_PREFIX}:app:bot-login"
BOT_USER_ID = f"{_PREFIX}:app:bot-user-id"
QUEUE_LABELS = f"{_PREFIX}:queue-labels"


def app_id(app: str) -> str:
    """Return the key of the App's numeric id, as GET /app answers it."""
    return f"{_PREFIX}:app:{app}:id"


def installation_token(app: str, installation_id: int) -> str:
    """Return the key of an App installation's cached token."""
    return f"{_PREFIX}:app:{app}:installation:{installation_id}:token"


def rate_limits(app: str) -> str:
    """Return the key of the App's installations' last known request budgets."""
    return f"{_PREFIX}:app:{app}:rate-limits"


def secondary_stop(app: str, installation_id: int) -> str:
    """Return the key holding until when (epoch s) GitHub asked an installation to wait."""
    return f"{_PREFIX}:app:{app}:installation:{installation_id}:stop"


def secondary_limits(app: str, installation_id: int) -> str:
    """Return the key counting an installation's secondary-limit answers in a row."""
    return f"{_PREFIX}:app:{app}:installation:{installation_id}:limits"


def write_slots(app: str, installation_id: int) -> str:
    """Return the key of the times (epoch s) an installation's writes of the last hour took."""
    return f"{_PREFIX}:app:{app}:installation:{installation_id}:writes"


def conditional_read(scope: str, url: str) -> str:
    """Return the key of what a GET of url last answered, with its ETag."""
    return f"{_PREFIX}:etag:{scope}:{_digest(url)}"


def role(repo: str, login: str) -> str:
    """Return the key of a collaborator's cached role on a repository."""
    return f"{_PREFIX}:role:{repo}:{login}"


def notice(what: str) -> str:
    """Return the key recording that what was noticed today."""
    return f"{_PREFIX}:notice:{_digest(what)}"


def config_seen(repo: str) -> str:
    """Return the key of the repository's file as last read."""
    return f"{_PREFIX}:config-seen:{repo}"


def repo_seen(repo: str) -> str:
    """Return the key of what Baton last read of a repository."""
    return f"{_PREFIX}:repo-seen:{repo}"


def repo_config(repo: str, blob_sha: str) -> str:
    """Return the key of the validated config of a version of a repository's file."""
    return f"{_PREFIX}:config:{repo}:{blob_sha}"


# Metrics ------------------------------------------------------------------------------

LAST = f"{_PREFIX}:last"
UNCONTAINED = f"{_PREFIX}:workers:uncontained"  # workers running agents with the sandbox off


def metric(name: str) -> str:
    """Return the key of one metric's fields."""
    return f"{_PREFIX}:metrics:{name}"


# Agent spend -------------------------------------------------------------------------

SPEND_BUDGETS = f"{_PREFIX}:spend-budgets"


def spend_day(day: date) -> str:
    """Return the key of the agent spend of one UTC day, the deployment's and per repository."""
    return f"{_PREFIX}:spend:{day.isoformat()}"


def spent(issue: IssueRef, attempt: int) -> str:
    """Return the key recording that an attempt's spend is in the ledger."""
    return _issue(issue, "spent", str(attempt))
