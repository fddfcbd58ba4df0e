"""A real Django settings module for tests/test_producers_django.py: Django's own
PostgreSQL backend (psycopg 3) on the test database named by SUPERVISOR_DJANGO_TEST_DSN,
plus a second alias on the same database for on_commit across connections, and a SQLite
one to be refused."""

import os

from psycopg.conninfo import conninfo_to_dict

_params = conninfo_to_dict(os.environ["SUPERVISOR_DJANGO_TEST_DSN"])
_database = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": _params.get("dbname", ""),
    "USER": _params.get("user", ""),
    "PASSWORD": _params.get("password", ""),
    "HOST": _params.get("host", ""),
    "PORT": _params.get("port", ""),
}

SECRET_KEY = "tests-only"
USE_TZ = True
INSTALLED_APPS: list[str] = []
DATABASES = {
    "default": _database,
    "other": dict(_database),
    "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}
