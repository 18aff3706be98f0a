"""Retention: every PRUNE_INTERVAL_MS the main loop asks prune_expired_jobs for one batch of finished jobs
past the database's retention (queue_settings.prune_succeeded_after for succeeded jobs,
prune_finished_after for dead and cancelled ones: a DBA's settings, which no worker login can shorten).
One call per round, so a worker never spends long on it; a full batch means more are waiting, and the
next round takes the next batch. The deletes skip locked rows, so workers pruning at once never wait for
each other."""
from __future__ import annotations

import time
from typing import Callable

from pgqw import db
from pgqw.config import Settings
from pgqw.worker.connection.database import Run
from pgqw.worker.log import Log


class Pruner:
    def __init__(self, settings: Settings, log: Log, run: Run, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.run = run  # one try on a pooled connection: the main loop backs off
        self.clock = clock
        self.interval_s = settings.prune_interval_ms / 1000.0
        self.batch = settings.prune_batch
        self.next_prune = clock()  # the first round prunes

    def prune(self) -> int:
        """One prune_expired_jobs call when one is due (else nothing); returns how many jobs it deleted."""
        now = self.clock()
        if now < self.next_prune:
            return 0
        # Due again only after an interval, whatever happens: a failing prune (e.g. a database not yet
        # migrated) costs one try per interval, never every round's claim.
        self.next_prune = now + self.interval_s
        deleted = self.run(lambda conn: db.prune_expired_jobs(conn, batch=self.batch))
        if deleted:
            self.log("pruned", f"{deleted} finished jobs past their retention")
        if deleted >= self.batch:
            self.next_prune = now  # more are waiting: the next round takes the next batch
        return deleted
