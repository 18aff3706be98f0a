"""The sweep: sweep_stuck recovers the jobs of workers that stopped heartbeating (any worker's, not
only this one's), at start and every SWEEP_INTERVAL_MS; each recovered job is logged as `swept`."""
from __future__ import annotations

from pgqw import db
from pgqw.worker.connection.database import Run
from pgqw.worker.job.slots import Slots
from pgqw.worker.log import Log, clock, short


class Sweeper:
    def __init__(self, slots: Slots, log: Log, run: Run) -> None:
        self.slots = slots
        self.log = log
        self.run = run  # one try on a pooled connection: the main loop backs off

    def sweep(self) -> list[db.Swept]:
        swept = self.run(db.sweep_stuck)
        for row in swept:
            self.slots.count("swept")
            self.log("swept", f"{short(row.job_id)} attempt {row.attempt} of worker {row.worker_id} "
                              f"(lease expired {clock(row.lease_expired_at)}) → {row.status}",
                     job_id=str(row.job_id), attempt=row.attempt, held_by=row.worker_id, status=row.status)
        return swept
