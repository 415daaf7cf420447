"""Which workflows would run the agent's code with secrets, read from their files (pure).

Mirrors https://docs.github.com/en/actions/writing-workflows/workflow-syntax-for-github-actions
(`on.push.branches`, `branches-ignore`, the filter pattern cheat sheet) and
https://docs.github.com/en/actions/security-for-github-actions/security-guides/using-secrets-in-github-actions
(a pull request from a branch of the repository itself gets its secrets).
"""

from __future__ import annotations

import pytest

from bot.domain.workflows import exposure

DEPLOY = (
    "jobs:\n  d:\n    steps:\n      - run: npm publish\n"
    "        env:\n          T: ${{ secrets.NPM_TOKEN }}\n"
)


@pytest.mark.parametrize(
    ("workflow", "said"),
    [
        ("on: push\n" + DEPLOY, "runs on push of Baton's branches with secrets NPM_TOKEN"),
        (
            "on: [push, pull_request]\njobs: {}\n",
            "runs on push and pull_request of Baton's branches with the repository's GITHUB_TOKEN",
        ),
        (
            "on:\n  push:\n    branches: ['**']\n" + DEPLOY,
            "runs on push of Baton's branches with secrets NPM_TOKEN",
        ),
        (
            "on:\n  push:\n    branches-ignore: [main]\n" + DEPLOY,
            "runs on push of Baton's branches with secrets NPM_TOKEN",
        ),
        (
            "on:\n  pull_request_target:\n" + DEPLOY,
            "runs on pull_request_target of Baton's branches with secrets NPM_TOKEN",
        ),
        ("on:\n  push:\n    branches: [main, 'release/*']\n" + DEPLOY, None),
        ("on:\n  push:\n    branches-ignore: ['baton/**']\n" + DEPLOY, None),
        ("on:\n  push:\n    tags: ['v*']\n" + DEPLOY, None),
        ("on: workflow_dispatch\n" + DEPLOY, None),
        (
            "on: [push\n  broken: yaml: here",
            "runs on push of Baton's branches with the repository's GITHUB_TOKEN",
        ),
    ],
)
def test_a_workflow_is_judged_by_whether_it_runs_on_baton_s_branches(
    workflow: str, said: str | None
) -> None:
    assert exposure(workflow) == said


@pytest.mark.parametrize(
    ("workflow", "said"),
    [
        ("on: [push, pull_request]\n" + DEPLOY, None),
        (
            "on: [pull_request, pull_request_target]\n" + DEPLOY,
            "runs on pull_request_target of Baton's pull requests from the fork with secrets "
            "NPM_TOKEN",
        ),
    ],
)
def test_from_a_fork_only_pull_request_target_runs_with_secrets(
    workflow: str, said: str | None
) -> None:
    """GitHub ("Using secrets in GitHub Actions"): "With the exception of GITHUB_TOKEN,
    secrets are not passed to the runner when a workflow is triggered from a forked
    repository"; `pull_request_target` runs in the base's context, with them."""
    assert exposure(workflow, from_fork=True) == said
