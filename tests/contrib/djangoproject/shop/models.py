from django.db import models


class Receipt(models.Model):
    """One per order a job confirmed; written by the handlers in tasks.py."""

    number = models.CharField(max_length=40, unique=True)
    job_id = models.UUIDField()
    via = models.CharField(max_length=10)  # "sync" or "async": which handler wrote it
