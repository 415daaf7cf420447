"""The sandbox's pull request page: what a person opening a PR's html_url reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from bot.devkit.maintainer import Maintainer, eventually

PROJECT = {"README.md": "# demo\n", ".sandbox/ci": "#!/bin/sh\ngrep -q hello hello.txt\n"}


async def opened_pull(maintainer: Maintainer, workdir: Path, title: str, body: str) -> Any:
    """Create a repository, push a branch on it and open a pull request from it."""
    repo = await maintainer.create_repo("demo", PROJECT, workdir)
    seed = workdir / "seed-demo"
    (seed / "hello.txt").write_text("hello\n")
    await maintainer.git.run(seed, "checkout", "--quiet", "-b", "say-hello")
    await maintainer.git.run(seed, "add", "--all")
    await maintainer.git.run(seed, "commit", "--quiet", "-m", "Say hello")
    await maintainer.git.run(
        seed, "push", "--quiet", repo["clone_url"], "say-hello", token=maintainer.token
    )
    data = {"title": title, "head": "say-hello", "base": "main", "body": body}
    return await maintainer.gh.post("/repos/{+repo}/pulls", {"repo": "maintainer/demo"}, data=data)


async def page(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.content_type, await response.text()


async def test_a_pull_requests_html_url_shows_it_to_a_person(
    maintainer: Maintainer, sandbox: dict[str, str], tmp_path: Path
) -> None:
    body = "\n".join(
        [
            "<!-- a marker only bots read -->",
            "Closes #1",
            "",
            "Says <script>alert(1)</script> **hello**,",
            "see [the guide](https://example.test/a?b=1&c=2).",
            "## Files changed",
            "- `hello.txt`",
            "- `<b>`",
            "",
            "| attempt | result |",
            "|---|---|",
            "| 1 | pushed-green |",
            "```",
            "**not bold** <i>",
            "```",
        ]
    )
    pull = await opened_pull(maintainer, tmp_path, "Say <b>hello</b>", body)
    await maintainer.comment("maintainer/demo", pull["number"], "Looks good & ready")

    async def checked() -> str | None:
        status, _, text = await page(pull["html_url"])
        return text if status == 200 and "All checks have passed" in text else None

    text = await eventually(checked, "the page showing the checks passed", 30)
    assert "Say &lt;b&gt;hello&lt;/b&gt;" in text
    assert "wants to merge 1 commit into <code>main</code> from <code>say-hello</code>" in text
    assert "Says &lt;script&gt;alert(1)&lt;/script&gt; <strong>hello</strong>,<br>see" in text
    assert '<a href="https://example.test/a?b=1&amp;c=2">the guide</a>' in text
    assert "<h3>Files changed</h3>" in text
    assert "<ul><li><code>hello.txt</code></li><li><code>&lt;b&gt;</code></li></ul>" in text
    assert "<th>attempt</th><th>result</th>" in text and "<td>pushed-green</td>" in text
    assert "<pre><code>**not bold** &lt;i&gt;</code></pre>" in text
    assert "<script" not in text and "<b>" not in text and "<i>" not in text
    assert "a marker only bots read" not in text
    assert "Looks good &amp; ready" in text
    assert "<strong>ci</strong>" in text and "+1" in text and "in 1 file" in text


async def test_the_page_is_404_for_what_is_not_a_pull_request_and_counts_no_api_call(
    maintainer: Maintainer, sandbox: dict[str, str], tmp_path: Path
) -> None:
    pull = await opened_pull(maintainer, tmp_path, "Say hello", "")
    await maintainer.gh.delete("/_sandbox/calls")
    base = sandbox["GITHUB_API_URL"]
    assert (await page(pull["html_url"]))[:2] == (200, "text/html")
    for path in ("/maintainer/demo/pull/99", "/maintainer/missing/pull/1"):
        assert (await page(base + path))[0] == 404
    issue = await maintainer.open_issue("maintainer/demo", "not a pull request", "")
    assert (await page(f"{base}/maintainer/demo/pull/{issue['number']}"))[0] == 404
    calls = await maintainer.gh.getitem("/_sandbox/calls")
    assert "anonymous" not in calls
