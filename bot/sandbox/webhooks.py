"""Signed webhook deliveries: ordered per repository, recorded, redeliverable, faultable."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import pathlib
import random
import time
import uuid
from typing import Any

import aiohttp
from pydantic import BaseModel, ValidationError

from bot.sandbox.auth import APP_ID
from bot.sandbox.state import utc_now

log = logging.getLogger(__name__)

HOOK_ID = 1
DELIVERY_TIMEOUT = 10.0
# How long a reordering worker holds a delivery, waiting for the next one to overtake it.
REORDER_WINDOW = 0.2
RESPONSE_KEPT = 10_000  # characters of a receiver's answer kept with its delivery
# The status GitHub records for a delivery that reached no one (its status_code is 0).
UNREACHABLE = "failed to connect to host"
TIMED_OUT = "timed out"


class DeliveryResponse(BaseModel):
    """What the receiver answered a delivery: its headers and (the start of) its body."""

    headers: dict[str, str]
    payload: str


class Delivery(BaseModel):
    """One delivery attempt, shaped like GitHub's hook delivery records."""

    id: int
    guid: str
    event: str
    action: str | None
    repository_id: int | None
    installation_id: int | None
    redelivery: bool = False
    delivered_at: str | None = None
    status: str = "pending"
    status_code: int | None = None
    duration: float | None = None
    url: str | None = None
    response: DeliveryResponse | None = None

    @property
    def failed(self) -> bool:
        """Return whether the delivery was attempted and its receiver did not answer 2xx."""
        return self.delivered_at is not None and not _succeeded(self.status_code)


class WebhookFaults(BaseModel):
    """Delivery misbehaviour to inject: duplicates and swapped neighbours."""

    duplicate_rate: float = 0.0
    reorder: bool = False


class WebhookSender:
    """Queue, sign, post and record webhook deliveries."""

    def __init__(
        self, data_dir: pathlib.Path, secret: str, url: str | None, rng: random.Random
    ) -> None:
        self.secret = secret.encode()
        self.url = url
        self.rng = rng
        self.faults = WebhookFaults()
        self.bodies = data_dir / "deliveries"
        self.bodies.mkdir(exist_ok=True)
        self.journal = data_dir / "deliveries.jsonl"
        self.deliveries = _read_journal(self.journal)
        self._last_id = max((d.id for d in self.deliveries), default=0)
        self._queues: dict[str, asyncio.Queue[Delivery]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._session: aiohttp.ClientSession | None = None

    def enqueue(
        self,
        key: str,
        event: str,
        payload: dict[str, Any],
        repository_id: int | None,
        installation_id: int | None,
    ) -> Delivery:
        """Record a new delivery and queue it behind earlier ones for the same key."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        delivery = self._record(
            guid=str(uuid.uuid4()),
            event=event,
            action=payload.get("action"),
            repository_id=repository_id,
            installation_id=installation_id,
        )
        (self.bodies / f"{delivery.guid}.json").write_bytes(body)
        self._queue(key).put_nowait(delivery)
        return delivery

    def redeliver(self, original: Delivery) -> Delivery:
        """Deliver a recorded delivery again: same guid, same body, as GitHub's redeliver does."""
        attempt = self._again(original, redelivery=True)
        self._queue("redeliveries").put_nowait(attempt)
        return attempt

    def body(self, delivery: Delivery) -> bytes:
        """Return the exact bytes a delivery posts."""
        return (self.bodies / f"{delivery.guid}.json").read_bytes()

    def payload(self, delivery: Delivery) -> Any:
        """Return what a delivery posts, parsed, as GitHub shows a delivery's request."""
        return json.loads(self.body(delivery))

    def headers(self, delivery: Delivery, body: bytes) -> dict[str, str]:
        """Build GitHub's delivery headers, signatures included."""
        return {
            "X-GitHub-Event": delivery.event,
            "X-GitHub-Delivery": delivery.guid,
            "X-GitHub-Hook-ID": str(HOOK_ID),
            "X-GitHub-Hook-Installation-Target-Type": "integration",
            "X-GitHub-Hook-Installation-Target-ID": str(APP_ID),
            "X-Hub-Signature": "sha1=" + hmac.new(self.secret, body, hashlib.sha1).hexdigest(),
            "X-Hub-Signature-256": "sha256="
            + hmac.new(self.secret, body, hashlib.sha256).hexdigest(),
            "User-Agent": "GitHub-Hookshot/sandbox",
            "Content-Type": "application/json",
        }

    async def idle(self) -> None:
        """Wait until every queued delivery has been attempted."""
        for queue in list(self._queues.values()):
            await queue.join()

    async def close(self, grace: float = 2.0) -> None:
        """Let queued deliveries go out for a moment, then stop the workers."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle(), grace)
        for task in self._workers.values():
            task.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def _record(self, **fields: Any) -> Delivery:
        self._last_id += 1
        delivery = Delivery(id=self._last_id, **fields)
        self.deliveries.append(delivery)
        return delivery

    def _again(self, original: Delivery, redelivery: bool) -> Delivery:
        """Record another attempt at a delivery (same guid, so the same body)."""
        return self._record(
            guid=original.guid,
            event=original.event,
            action=original.action,
            repository_id=original.repository_id,
            installation_id=original.installation_id,
            redelivery=redelivery,
        )

    def _queue(self, key: str) -> asyncio.Queue[Delivery]:
        if key not in self._queues:
            self._queues[key] = asyncio.Queue()
            self._workers[key] = asyncio.create_task(self._work(self._queues[key]))
        return self._queues[key]

    async def _work(self, queue: asyncio.Queue[Delivery]) -> None:
        while True:
            first = await queue.get()
            if self.faults.reorder:
                try:
                    second = await asyncio.wait_for(queue.get(), REORDER_WINDOW)
                except TimeoutError:
                    pass
                else:
                    await self._deliver(second)
                    queue.task_done()
            await self._deliver(first)
            queue.task_done()

    async def _deliver(self, delivery: Delivery) -> None:
        await self._post(delivery)
        if self.faults.duplicate_rate and self.rng.random() < self.faults.duplicate_rate:
            await self._post(self._again(delivery, redelivery=False))

    async def _post(self, delivery: Delivery) -> None:
        url = self.url
        delivery.delivered_at = utc_now()
        delivery.url = url
        if url is None:
            delivery.status = "not delivered: no webhook URL configured"
        else:
            started = time.monotonic()
            await self._attempt(delivery, url)
            delivery.duration = round(time.monotonic() - started, 3)
        with self.journal.open("a") as journal:
            journal.write(delivery.model_dump_json() + "\n")
        log.log(
            logging.INFO if delivery.failed else logging.DEBUG,
            "delivery %s %s.%s -> %s",
            delivery.id,
            delivery.event,
            delivery.action,
            delivery.status,
        )

    async def _attempt(self, delivery: Delivery, url: str) -> None:
        """Post a delivery and record what came of it, in GitHub's words."""
        body = self.body(delivery)
        try:
            session = self._session = self._session or aiohttp.ClientSession()
            async with session.post(
                url,
                data=body,
                headers=self.headers(delivery, body),
                timeout=aiohttp.ClientTimeout(total=DELIVERY_TIMEOUT),
            ) as response:
                answer = await response.text(errors="replace")
        except TimeoutError:
            delivery.status = TIMED_OUT
            return
        except aiohttp.ClientError as exc:
            delivery.status = UNREACHABLE
            log.info("delivery %s not delivered: %s: %s", delivery.id, type(exc).__name__, exc)
            return
        delivery.status_code = response.status
        delivery.status = (
            "OK" if _succeeded(response.status) else f"Invalid HTTP Response: {response.status}"
        )
        delivery.response = DeliveryResponse(
            headers=dict(response.headers), payload=answer[:RESPONSE_KEPT]
        )


def _succeeded(status_code: int | None) -> bool:
    """Return whether a receiver's answer counts as delivered: GitHub records any 2xx as OK."""
    return status_code is not None and 200 <= status_code < 300


def _read_journal(path: pathlib.Path) -> list[Delivery]:
    """Read the delivery records, skipping a line torn by a crash mid-write."""
    records = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(Delivery.model_validate_json(line))
            except ValidationError:
                log.warning("skipping an unreadable delivery record in %s", path)
    return records
