"""The shop project with SQLite as its only database: the queue has nowhere to live."""
from settings import *

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
