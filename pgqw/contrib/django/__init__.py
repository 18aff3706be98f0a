"""pg-queue-worker in a Django project: add "pgqw.contrib.django" to INSTALLED_APPS.

- `manage.py migrate` installs the queue in the project's database (migrations/0001_queue_schema.py) and
  brings it up to date on every later run (apps.py); `manage.py pgqw_migrate` does the same and registers
  the project's task types.
- `manage.py pgqw_worker [pgqw worker's options]` runs a worker with Django set up, each handler between
  Django's connection cleanup (attempts.py).
- Enqueue on Django's own connection, inside `transaction.atomic()`: `my_task.enqueue(connection, payload)`.

Settings (conf.py): PGQW_DATABASE_URL, PGQW_DATABASE_ALIAS, PGQW_TASKS, PGQW_CREATE_ROLES; the rest are
pgqw's environment variables. docs/django.md tells the whole story.
"""
