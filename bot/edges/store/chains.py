"""Chains of issues run one after another (bot/domain/chains.py), and their index."""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager

from bot.domain.model import Chain, IssueRef
from bot.edges.store import keys
from bot.edges.store.base import RUN_TTL_S, StoreBase, text

CHAIN_LOCK_TTL_MS = 300_000  # restacking a chain's branches: a few fetches and pushes


class ChainStore(StoreBase):
    """Chain records, which chain each issue belongs to, and the chain mutex."""

    def save_chain(self, chain: Chain) -> Chain:
        """Record a chain as queued, one generation after any earlier queueing of it.

        Each link then belongs to this chain: an issue runs in one chain at a time.
        """
        with self.redis.pipeline() as pipe:
            pipe.incr(keys.chain_generation(chain.chain_id))
            pipe.expire(keys.chain_generation(chain.chain_id), RUN_TTL_S)
            generation = int(pipe.execute()[0])
        saved = chain.model_copy(update={"generation": generation})
        with self.redis.pipeline() as pipe:
            pipe.set(keys.chain(chain.chain_id), saved.model_dump_json(), ex=RUN_TTL_S)
            # The overview lists chains from this index, never by scanning the keyspace.
            pipe.zadd(keys.CHAINS, {chain.chain_id: time.time()})
            pipe.zremrangebyscore(keys.CHAINS, "-inf", time.time() - RUN_TTL_S)
            for number in {*chain.links, chain.head}:
                pipe.set(keys.issue_chain(chain.issue(number)), chain.chain_id, ex=RUN_TTL_S)
            pipe.execute()
        return saved

    def chain(self, chain_id: str) -> Chain | None:
        """Return a chain by its id."""
        raw = self.redis.get(keys.chain(chain_id))
        return None if raw is None else Chain.model_validate_json(raw)

    def chain_of(self, issue: IssueRef) -> Chain | None:
        """Return the chain the issue is a link (or the tracking issue) of, if any."""
        chain_id = self.redis.get(keys.issue_chain(issue))
        return None if chain_id is None else self.chain(text(chain_id))

    def chains(self) -> list[Chain]:
        """Return every recorded chain, newest first."""
        ids = [text(member) for member in self.redis.zrevrange(keys.CHAINS, 0, -1)]
        raws = self.redis.mget([keys.chain(chain_id) for chain_id in ids]) if ids else []
        return [Chain.model_validate_json(raw) for raw in raws if raw is not None]

    def chain_lock(self, chain: Chain) -> AbstractAsyncContextManager[None]:
        """Hold the chain's mutex, so two merges never restack its branches at once."""
        key = keys.chain_lock(chain.chain_id)
        return self._mutex(key, CHAIN_LOCK_TTL_MS, CHAIN_LOCK_TTL_MS / 1000)
