"""The shop's task types: each writes a Receipt through the ORM, and returns the backend pid of the Django
connection it used (so the tests can see which connection ran it)."""
from asgiref.sync import sync_to_async
from django.db import connection
from pydantic import BaseModel

from pgqw.tasks import Context, Retry, task
from shop.models import Receipt


class Order(BaseModel):
    number: str


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("select pg_backend_pid()")
        return cursor.fetchone()[0]


@task("shop_receipt", max_attempts=3, retry=Retry(base_ms=0, max_jitter_ms=0))
def shop_receipt(payload: Order, ctx: Context) -> dict:
    receipt, _ = Receipt.objects.get_or_create(number=payload.number, defaults={"job_id": ctx.job_id, "via": "sync"})
    return {"receipt": receipt.pk, "backend_pid": _backend_pid()}


@task("shop_receipt_async", max_attempts=3, retry=Retry(base_ms=0, max_jitter_ms=0))
async def shop_receipt_async(payload: Order, ctx: Context) -> dict:
    receipt, _ = await Receipt.objects.aget_or_create(number=payload.number,
                                                      defaults={"job_id": ctx.job_id, "via": "async"})
    return {"receipt": receipt.pk, "backend_pid": await sync_to_async(_backend_pid)()}
