"""pgqw.db is a package by area; `from pgqw import db` still gives every wrapper, row type and constant."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

from pgqw import db


def _areas() -> list[str]:
    return [m.name for m in pkgutil.iter_modules(db.__path__) if not m.name.startswith("_")]


def test_db_reexports_every_public_name_of_its_modules() -> None:
    for area in _areas():
        module = importlib.import_module(f"pgqw.db.{area}")
        defined = {name for name, value in vars(module).items()
                   if not name.startswith("_") and getattr(value, "__module__", module.__name__) == module.__name__
                   and (inspect.isfunction(value) or inspect.isclass(value) or name.isupper())}
        missing = defined - set(db.__all__)
        assert not missing, (area, missing)
        assert all(getattr(db, name) is getattr(module, name) for name in defined)


def test_db_names_are_each_defined_once() -> None:
    assert len(db.__all__) == len(set(db.__all__))
    assert all(hasattr(db, name) for name in db.__all__)


def test_db_wrappers_take_the_connection_first_and_keywords_after() -> None:
    for name in db.__all__:
        fn = getattr(db, name)
        if not inspect.isfunction(fn) or name in ("enqueue_params", "jobs_json", "job_id_range", "login_roles"):
            continue
        params = list(inspect.signature(fn).parameters.values())
        assert params[0].name == "conn", name
        assert all(p.kind is p.KEYWORD_ONLY for p in params[1:]), name
