"""Webhook ingest: `baton web` against a bare aiohttp handler, on loopback, in one run.

Sends signed `issues.labeled` deliveries (GitHub's own payload example, each with
a fresh delivery id, carrying the queue label so every one is verified, recorded,
routed and enqueued) at rising concurrency, then at a fixed 500 deliveries/s,
and prints deliveries/s, p50 and p99 for both servers and Baton's ratio to the
bare handler. Targets (DESIGN.md): ratio >= 0.5; p99 < 10 ms at 500/s.

With one delivery in flight the ratio compares latencies rather than capacity:
Baton's answer waits for one Redis round trip (the delivery is recorded before
it is acknowledged), which on loopback costs about as much as the bare
handler's whole request. The summary gives the peak-throughput ratio and the
lowest per-level ratio side by side. Each level loads both servers in turns
(four rounds each), so a slow moment of the machine falls on both alike.

It runs two passes: the web process alone, as deployed (the forwarders that turn
accepted deliveries into RQ jobs run beside the workers, elsewhere); then again
with a forwarder on this same machine, sharing its cores (its log goes to stderr).

    python bench/ingest.py [--seconds 5] [--levels 1 8 32 64] 2>/dev/null
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import aiohttp

from bot.devkit.devstack import Process, free_port, http_ok, spawn, start_redis_server, wait_until
from bot.edges.intake import ForwarderProcess

SECRET = "bench-secret"  # noqa: S105 - a throwaway secret for a loopback benchmark
PAYLOAD = Path(__file__).parents[1] / "tests/fixtures/github/payloads/issues/labeled.ghes-3.5.json"
BARE_SERVER = """
import sys
from aiohttp import web
async def accept(request):
    await request.read()
    return web.json_response({"outcome": "accepted"}, status=202)
async def health(request):
    return web.json_response({"status": "ok"})
app = web.Application()
app.router.add_post("/webhook", accept)
app.router.add_get("/healthz", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


@dataclass
class Figures:
    """Throughput and latency of one load level against one server."""

    sent: int
    failed: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.sent / self.seconds

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def delivery_body() -> bytes:
    data = json.loads(PAYLOAD.read_text())
    data["label"]["name"] = "baton:queue"
    return json.dumps(data).encode()


def headers(body: bytes) -> dict[str, str]:
    return {
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": "sha256="
        + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest(),
        "Content-Type": "application/json",
    }


async def one(session: aiohttp.ClientSession, url: str, body: bytes, figures: Figures) -> None:
    started = time.perf_counter()
    async with session.post(url, data=body, headers=headers(body)) as response:
        await response.read()
        ok = response.status == 202
    figures.latencies_ms.append((time.perf_counter() - started) * 1000)
    figures.sent += 1
    figures.failed += 0 if ok else 1


async def closed_loop(url: str, body: bytes, concurrency: int, seconds: float) -> Figures:
    """Keep `concurrency` deliveries in flight for `seconds`."""
    figures = Figures(0, 0, seconds, [])
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def lane() -> None:
            while time.perf_counter() < deadline:
                await one(session, url, body, figures)

        started = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(concurrency)))
        figures.seconds = time.perf_counter() - started
    return figures


async def open_loop(url: str, body: bytes, rate: int, seconds: float) -> Figures:
    """Send deliveries at a fixed rate, whatever the server's latency."""
    figures = Figures(0, 0, seconds, [])
    interval = 1.0 / rate
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as session:
        tasks = []
        started = time.perf_counter()
        for n in range(int(rate * seconds)):
            delay = started + n * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, url, body, figures)))
        await asyncio.gather(*tasks)
        figures.seconds = time.perf_counter() - started
    return figures


ROUNDS = 4


async def alternating(
    load: Callable[[str, bytes, int, float], Awaitable[Figures]],
    baton_url: str,
    bare_url: str,
    body: bytes,
    level: int,
    seconds: float,
) -> tuple[Figures, Figures]:
    """Load both servers in turns, so a slow moment of the machine falls on both alike."""
    baton, bare = Figures(0, 0, 0.0, []), Figures(0, 0, 0.0, [])
    for _ in range(ROUNDS):
        for total, url in ((baton, baton_url), (bare, bare_url)):
            part = await load(url, body, level, seconds / ROUNDS)
            total.sent += part.sent
            total.failed += part.failed
            total.seconds += part.seconds
            total.latencies_ms += part.latencies_ms
    return baton, bare


def start_servers(workdir: Path) -> tuple[str, str, list[Process]]:
    redis_url, redis_process = start_redis_server(workdir / "redis")
    baton_port, bare_port = free_port(), free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "GITHUB_WEBHOOK_SECRET": SECRET,
        "PORT": str(baton_port),
        "BATON_DATA_DIR": str(workdir / "data"),
    }
    baton = spawn(
        "baton-web", [sys.executable, "-m", "bot", "web", "--host", "127.0.0.1"], workdir, env
    )
    bare = spawn(
        "bare", [sys.executable, "-c", BARE_SERVER, str(bare_port)], workdir, dict(os.environ)
    )
    os.environ.update(REDIS_URL=redis_url)  # for the forwarder of the second pass
    for port in (baton_port, bare_port):
        wait_until(
            partial(http_ok, f"http://127.0.0.1:{port}/healthz"), f"server on {port} answering"
        )
    return (
        f"http://127.0.0.1:{baton_port}/webhook",
        f"http://127.0.0.1:{bare_port}/webhook",
        [baton, bare, redis_process],
    )


def row(name: str, figures: Figures) -> str:
    return (
        f"{name:<6} {figures.rate:>9.0f}/s  p50 {figures.percentile(0.5):6.2f} ms  "
        f"p99 {figures.percentile(0.99):6.2f} ms  failed {figures.failed}"
    )


async def measure(baton_url: str, bare_url: str, levels: list[int], seconds: float) -> None:
    body = delivery_body()
    print("closed loop (N deliveries in flight):")
    ratios, peaks = [], []
    for level in levels:
        await closed_loop(baton_url, body, level, 0.5)  # warm both servers at this level
        await closed_loop(bare_url, body, level, 0.5)
        baton, bare = await alternating(closed_loop, baton_url, bare_url, body, level, seconds)
        ratio = baton.rate / bare.rate
        ratios.append(ratio)
        peaks.append((baton.rate, bare.rate))
        print(f" concurrency {level}:")
        print(f"  {row('baton', baton)}")
        print(f"  {row('bare', bare)}")
        print(f"  ratio baton/bare {ratio:.2f}")
    print("\nopen loop at 500 deliveries/s:")
    baton, bare = await alternating(open_loop, baton_url, bare_url, body, 500, seconds)
    print(f"  {row('baton', baton)}")
    print(f"  {row('bare', bare)}")
    peak_baton, peak_bare = (max(rates) for rates in zip(*peaks, strict=True))
    print(
        f"\nsummary: peak deliveries/s {peak_baton:.0f} against {peak_bare:.0f}, "
        f"ratio {peak_baton / peak_bare:.2f} (target >= 0.5); "
        f"lowest ratio at one level {min(ratios):.2f}; "
        f"p99 at 500/s {baton.percentile(0.99):.2f} ms (target < 10 ms), "
        f"median p50 {statistics.median(baton.latencies_ms):.2f} ms\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 64])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="baton-bench-") as tmp:
        baton_url, bare_url, processes = start_servers(Path(tmp))
        print(f"payload: {PAYLOAD.name}, {args.seconds:.0f}s per level\n")
        try:
            print("== pass 1: the web process alone (forwarders run beside the workers)")
            asyncio.run(measure(baton_url, bare_url, args.levels, args.seconds))
            print("== pass 2: with a forwarder turning deliveries into RQ jobs on this machine")
            forwarder = ForwarderProcess(verbose=False)
            try:
                asyncio.run(measure(baton_url, bare_url, args.levels, args.seconds))
            finally:
                forwarder.stop()
        finally:
            for process in processes:
                process.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
