"""POST /graphql: GitHub's GraphQL API, as far as Baton uses it, which is one mutation.

`markPullRequestReadyForReview(input: {pullRequestId: ID!, clientMutationId: String})`
takes a draft pull request out of draft, found by the `node_id` its REST payloads carry,
and sends `pull_request.ready_for_review`. An App needs `pull_requests: write`; a person,
write access or authorship of the pull request.

As on GitHub, everything but a missing credential answers HTTP 200: a document the schema
refuses gets `errors` alone (bot/sandbox/graphql.py); a mutation refused or given a node
it cannot resolve gets null in `data` and an `errors` entry typed FORBIDDEN or NOT_FOUND.
"""

from __future__ import annotations

import base64
import binascii
import re

from aiohttp import web

from bot.sandbox import events, graphql
from bot.sandbox.auth import Actor
from bot.sandbox.graphql import Field, FieldType, GraphQLError, Json, Operation, Schema
from bot.sandbox.hub import Hub, actor_of, hub_of
from bot.sandbox.permissions import requires_no_permission, write
from bot.sandbox.rest import ApiError, forbidden_integration, json_response, read_json
from bot.sandbox.state import Issue, Repo, node_id

routes = web.RouteTableDef()

MARK_READY = "markPullRequestReadyForReview"
SCHEMA = Schema(
    objects={
        "Query": {},
        "Mutation": {
            MARK_READY: FieldType(
                "MarkPullRequestReadyForReviewPayload",
                (("input", "MarkPullRequestReadyForReviewInput!"),),
            )
        },
        "MarkPullRequestReadyForReviewPayload": {
            "clientMutationId": FieldType("String"),
            "pullRequest": FieldType("PullRequest"),
        },
        "PullRequest": {
            "id": FieldType("ID!"),
            "number": FieldType("Int!"),
            "isDraft": FieldType("Boolean!"),
            "title": FieldType("String!"),
            "state": FieldType("PullRequestState!"),
            "url": FieldType("URI!"),
        },
    },
    inputs={
        "MarkPullRequestReadyForReviewInput": {"pullRequestId": "ID!", "clientMutationId": "String"}
    },
)
AUTHENTICATION_DOCS = (
    "https://docs.github.com/graphql/guides/forming-calls-with-graphql#authenticating-with-graphql"
)
_NODE = re.compile(r"0\d+:([A-Za-z]+)(\d+)")


@routes.post("/graphql")
@requires_no_permission("GraphQL: each mutation checks its permission and answers in `errors`")
async def graphql_api(request: web.Request) -> web.Response:
    """Run a GraphQL request: parse, validate, coerce every root field, then resolve them."""
    hub = hub_of(request)
    actor = actor_of(request)
    if actor is None:
        raise ApiError(
            401,
            "This endpoint requires you to be authenticated.",
            documentation_url=AUTHENTICATION_DOCS,
        )
    try:
        operation, variables = graphql.operation_of(await read_json(request))
        graphql.validate(SCHEMA, operation)
        root = graphql.ROOTS[operation.kind]
        inputs = [
            graphql.arguments_of(SCHEMA, root, field, operation, variables)["input"]
            for field in operation.selections
            if field.name == MARK_READY
        ]
    except GraphQLError as err:
        return json_response({"errors": err.errors})
    return json_response(await _resolve(hub, actor, operation, inputs))


async def _resolve(hub: Hub, actor: Actor, operation: Operation, inputs: list[Json]) -> Json:
    """Resolve a validated mutation's root fields in order, as GitHub runs mutations."""
    data: Json = {}
    errors: list[Json] = []
    pending = iter(inputs)
    for field in operation.selections:
        if field.name == "__typename":
            data[field.key] = graphql.ROOTS[operation.kind]
            continue
        data[field.key], error = await _mark_ready(hub, actor, field, next(pending))
        if error is not None:
            errors.append(error)
    return {"data": data, "errors": errors} if errors else {"data": data}


async def _mark_ready(
    hub: Hub, actor: Actor, field: Field, given: Json
) -> tuple[Json | None, Json | None]:
    """Mark one pull request ready for review; return the payload asked for, or an error."""
    node = str(given["pullRequestId"])
    found = _pull_of(hub, actor, node)
    if found is None:
        message = f"Could not resolve to a node with the global id of '{node}'."
        return None, _field_error("NOT_FOUND", message, field)
    repo, issue = found
    refused = _refusal(hub, actor, repo, issue)
    if refused is not None:
        return None, _field_error("FORBIDDEN", refused, field)
    assert actor.login is not None and issue.pull is not None
    await events.mark_ready(hub, repo, issue, actor.login)
    hub.changed()
    pull = issue.pull
    state = "MERGED" if pull.merged_at else issue.state.upper()
    payload = {
        "__typename": "MarkPullRequestReadyForReviewPayload",
        "clientMutationId": given.get("clientMutationId"),
        "pullRequest": {
            "__typename": "PullRequest",
            "id": node_id("PullRequest", issue.id),
            "number": issue.number,
            "isDraft": pull.draft,
            "title": issue.title,
            "state": state,
            "url": f"{hub.render.repo_html(repo)}/pull/{issue.number}",
        },
    }
    return graphql.select(field.selections, payload), None


def _pull_of(hub: Hub, actor: Actor, node: str) -> tuple[Repo, Issue] | None:
    """Find the pull request a node id names, among those the caller may see."""
    try:
        match = _NODE.fullmatch(base64.b64decode(node, validate=True).decode())
    except (binascii.Error, UnicodeDecodeError):
        return None
    if match is None or match[1] != "PullRequest":
        return None
    wanted = int(match[2])
    for repo in hub.state.repos:
        issue = next((i for i in repo.issues.values() if i.id == wanted and i.pull), None)
        if issue is not None:
            return (repo, issue) if _visible(hub, actor, repo) else None
    return None


def _visible(hub: Hub, actor: Actor, repo: Repo) -> bool:
    try:
        hub.repo_for(actor, repo.owner, repo.name, write=False)
    except ApiError:
        return False
    return True


def _refusal(hub: Hub, actor: Actor, repo: Repo, issue: Issue) -> str | None:
    """Say why the caller may not take this pull request out of draft; None when it may."""
    if actor.kind == "installation":
        try:
            hub.repo_for(actor, repo.owner, repo.name, write=True)
        except ApiError as err:
            return err.message
        if write("pull_requests").granted_by(actor.permissions):
            return None
        return forbidden_integration().message
    if actor.kind == "admin" and (actor.login == issue.user or hub.has_role(actor, repo, "write")):
        return None
    who = actor.login or "This App"
    return f"{who} does not have the correct permissions to execute `MarkPullRequestReadyForReview`"


def _field_error(kind: str, message: str, field: Field) -> Json:
    error: Json = {"type": kind, "path": [field.key]}
    if kind == "FORBIDDEN":
        error["extensions"] = {"saml_failure": False}
    error.update({"locations": [field.at.json()], "message": message})
    return error
