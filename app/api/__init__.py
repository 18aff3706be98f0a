"""The JSON API under /api: one blueprint per area, each route checking its input, making one call of
pgqw.db, and answering.

  jobs.py           POST/GET /api/jobs, /api/jobs/{id} and its attempts, retry, cancel, result; /api/stats
  orchestration.py  /api/workflows/{id}, /api/batches, /api/jobs/bulk/retry and /cancel
  queues.py         /api/queues, pause, resume, limit, key-limit, rate; /api/throughput
  workers.py        /api/workers
  schedules.py      /api/schedules, pause, resume
  task_types.py     /api/task-types (and the payload check POST /api/jobs uses)
  docs.py           /api/openapi.json
  common.py         what they share: limits, the pool, reading a JSON body

Every response is {"data": ...} or, through app.errors, {"error": {"code", "message", "details"?}}.
"""
from __future__ import annotations

from flask import Blueprint

from . import docs, jobs, orchestration, queues, schedules, task_types, workers
from .common import NUMBER_PROBLEM

__all__ = ["NUMBER_PROBLEM", "bp"]

bp = Blueprint("api", __name__, url_prefix="/api")
for _area in (jobs, orchestration, queues, workers, schedules, task_types, docs):
    bp.register_blueprint(_area.bp)
