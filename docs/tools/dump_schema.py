"""Writes db/schema.sql: the schema a fresh `pgqw migrate` makes, as pg_dump prints it.

    .venv/bin/python docs/tools/dump_schema.py [DSN of a server where databases may be created] [--check]

Default DSN: postgresql://postgres@127.0.0.1:5432/postgres. A scratch database is created on that
server, the queue is migrated into it (pgqw.migrate.migrate, schema `pgqw` whatever PGQW_SCHEMA says),
`pg_dump --schema-only --schema=pgqw --no-owner --no-privileges` prints it, and the scratch database
is dropped. What varies between runs is taken out (the exact versions in the `Dumped from/by` lines,
the random `\\restrict` tokens, the session SET lines), so the file changes only when the schema does.

pg_dump must be of the server's major version (a newer one prints the same schema differently): the
one in /usr/lib/postgresql/<major>/bin, else pg_config's bindir, else the one on PATH, whichever is of
that version. --check writes nothing and exits 1, with a unified diff, when db/schema.sql differs.
tests/test_schema_dump.py makes the same comparison.
"""
from __future__ import annotations

import argparse
import difflib
import glob
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from pgqw.migrate import migrate  # noqa: E402

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEMA = "pgqw"  # the default name only: the committed dump is of the schema as most installs have it
OUT = ROOT / "db" / "schema.sql"
COMMAND = ".venv/bin/python docs/tools/dump_schema.py"
HEADER = (f"-- The schema a fresh `pgqw migrate` makes (schema {SCHEMA}), as pg_dump prints it. Generated: do not edit.\n"
          f"-- Regenerate after a migration or a function changes: {COMMAND} [DSN]\n"
          "-- CI compares it with a fresh migration (tests/test_schema_dump.py).\n")
_MAJOR_LINE = re.compile(r"^-- Dumped (from database|by pg_dump) version (\d+)\S*.*$", re.M)


class DumpError(RuntimeError):
    """The dump could not be made (no pg_dump of the server's version, pg_dump failed)."""


def server_major(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute("show server_version_num").fetchone()[0]) // 10000


def _major_of(binary: str) -> int | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return None
    m = re.search(r"(\d+)(?:\.\d+)?", out)
    return int(m.group(1)) if m else None


def find_pg_dump(major: int) -> str | None:
    """A pg_dump of that major version, or None."""
    candidates = [f"/usr/lib/postgresql/{major}/bin/pg_dump"]
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            bindir = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            bindir = ""
        if bindir:
            candidates.append(str(Path(bindir) / "pg_dump"))
    on_path = shutil.which("pg_dump")
    if on_path:
        candidates.append(on_path)
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_dump"))
    for binary in dict.fromkeys(candidates):
        if Path(binary).is_file() and _major_of(binary) == major:
            return binary
    return None


def normalise(text: str) -> str:
    """The dump without what changes from run to run or machine to machine: the versions' minor parts
    and build strings, \\restrict/\\unrestrict tokens, the session SET lines and set_config call."""
    text = _MAJOR_LINE.sub(lambda m: f"-- Dumped {m.group(1)} version {m.group(2)}", text)
    kept = [line for line in text.splitlines()
            if not re.match(r"^\\(un)?restrict\b", line)
            and not re.match(r"^SET \w+ = .*;$", line)
            and line != "SELECT pg_catalog.set_config('search_path', '', false);"]
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip("\n")
    return HEADER + "\n" + body + "\n"


def dump_major(text: str) -> int | None:
    """The server major version a dump (normalised or not) was made from."""
    m = re.search(r"^-- Dumped from database version (\d+)", text, re.M)
    return int(m.group(1)) if m else None


def dump(server: str = DEFAULT_DSN, *, pg_dump: str | None = None) -> str:
    """The normalised dump of a freshly migrated scratch database on the server."""
    major = server_major(server)
    pg_dump = pg_dump or find_pg_dump(major)
    if pg_dump is None:
        raise DumpError(f"no pg_dump of PostgreSQL {major} (the server's version) was found: looked in "
                        f"/usr/lib/postgresql/{major}/bin, pg_config --bindir and PATH")
    name = f"pgqw_dump_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    try:
        dsn = make_conninfo(server, dbname=name)
        migrate(dsn, schema=SCHEMA)
        done = subprocess.run([pg_dump, "--schema-only", f"--schema={SCHEMA}", "--no-owner", "--no-privileges",
                               "--dbname", dsn], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise DumpError(f"pg_dump exited {done.returncode}: {done.stderr.strip()}")
        return normalise(done.stdout)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def diff(committed: str, fresh: str) -> str:
    return "".join(difflib.unified_diff(committed.splitlines(keepends=True), fresh.splitlines(keepends=True),
                                        "db/schema.sql (committed)", "db/schema.sql (fresh migrate)"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn", nargs="?", default=DEFAULT_DSN, help="a server where databases may be created")
    parser.add_argument("--check", action="store_true", help="compare with db/schema.sql instead of writing it")
    args = parser.parse_args(argv)
    try:
        fresh = dump(args.dsn)
    except DumpError as exc:
        print(f"dump_schema: {exc}", file=sys.stderr)
        return 2
    if args.check:
        committed = OUT.read_text() if OUT.exists() else ""
        if committed != fresh:
            sys.stdout.write(diff(committed, fresh))
            print(f"dump_schema: db/schema.sql differs from a fresh migrate; regenerate: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(fresh)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(fresh.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
