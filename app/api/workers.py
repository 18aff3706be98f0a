"""The workers that registered, alive or gone."""
from __future__ import annotations

from flask import Blueprint, Response

from pgqw import db

from ..models import Worker
from .common import ok, pool

bp = Blueprint("workers", __name__)

WORKERS_SHOWN = 200


@bp.get("/workers")
def list_workers() -> Response:
    """The workers that registered (register_worker), the live ones first, at most 200. alive is the
    database's verdict: the worker's own heartbeat keeps expires_at ahead of now() and it has not stopped."""
    with pool().connection() as conn:
        found = db.list_worker_status(conn, limit=WORKERS_SHOWN)
    return ok([Worker.of(w) for w in found])
