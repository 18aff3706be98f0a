"""Retention: every PRUNE_INTERVAL_MS the main loop asks prune_jobs for one batch of old finished jobs
(succeeded after PRUNE_SUCCEEDED_AFTER_S, dead and cancelled after PRUNE_FINISHED_AFTER_S). One call per
round, so a worker never spends long on it; a full batch means more are waiting, and the next round
takes the next batch. prune_jobs skips locked rows, so workers pruning at once never wait for each other."""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Callable

from pgqw import db
from pgqw.config import Settings
from pgqw.worker.database import Run
from pgqw.worker.log import Log


class Pruner:
    def __init__(self, settings: Settings, log: Log, run: Run, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.run = run  # one try on a pooled connection: the main loop backs off
        self.clock = clock
        self.interval_s = settings.prune_interval_ms / 1000.0
        self.batch = settings.prune_batch
        # (statuses, age): each rule in turn, until its batch comes back short of full.
        self.rules: list[tuple[tuple[str, ...], timedelta]] = [
            (("succeeded",), timedelta(seconds=settings.prune_succeeded_after_s)),
            (("dead", "cancelled"), timedelta(seconds=settings.prune_finished_after_s)),
        ]
        self.rule = 0
        self.next_prune = clock()  # the first round prunes

    def prune(self) -> int:
        """One prune_jobs call when one is due (else nothing); returns how many jobs it deleted."""
        now = self.clock()
        if now < self.next_prune:
            return 0
        statuses, age = self.rules[self.rule]
        # Due again only after an interval, whatever happens: a failing prune (e.g. a database not yet
        # migrated to prune_jobs) costs one try per interval, never every round's claim.
        self.next_prune = now + self.interval_s
        deleted = self.run(lambda conn: db.prune_jobs(conn, older_than=age, statuses=statuses, batch=self.batch))
        if deleted:
            self.log("pruned", f"{deleted} {'/'.join(statuses)} jobs finished more than {_age(age)} ago")
        if deleted >= self.batch:
            self.next_prune = now  # more are waiting: the next round takes the next batch
        else:
            self.rule = (self.rule + 1) % len(self.rules)
            if self.rule != 0:
                self.next_prune = now  # the next rule's first batch, next round
        return deleted


def _age(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    if seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds}s"
