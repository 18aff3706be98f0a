"""A tiny Django project using pgqw.contrib.django: the app `shop`, its database given by the tests.

SHOP_DATABASE: the libpq conninfo of the database, split into DATABASES' NAME, USER, PASSWORD, HOST and
PORT as a project's settings hold them. SHOP_CONN_MAX_AGE ("none": persistent) and SHOP_CONN_HEALTH_CHECKS
("1") set Django's connection lifetime; SHOP_PGQW_DATABASE_URL, the queue's database when it is not
DATABASES['default'] (PGQW_DATABASE_URL); SHOP_PGQW_TASKS, the task modules (PGQW_TASKS) when not the
installed apps' tasks modules. Django's own connections are named shop-orm (OPTIONS), so the
tests can tell them from the worker's.
"""
import os

from psycopg.conninfo import conninfo_to_dict

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "pgqw.contrib.django",
    "shop",
]

_db = conninfo_to_dict(os.environ["SHOP_DATABASE"])
_max_age = os.environ.get("SHOP_CONN_MAX_AGE", "0")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db["dbname"],
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
        "OPTIONS": {"application_name": "shop-orm"},
        "CONN_MAX_AGE": None if _max_age == "none" else int(_max_age),
        "CONN_HEALTH_CHECKS": os.environ.get("SHOP_CONN_HEALTH_CHECKS") == "1",
    }
}

PGQW_DATABASE_URL = os.environ.get("SHOP_PGQW_DATABASE_URL") or None
PGQW_TASKS = os.environ.get("SHOP_PGQW_TASKS") or None
