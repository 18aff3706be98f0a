"""pgqw evidence: runs the break-it scenarios with real processes and writes docs/evidence/.

Each scenario gets a scratch database of its own on the configured server (DATABASE_URL, or the
embedded one), so the evidence never mixes with the jobs of a running system.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqw import config
from pgqw.embedded import database_url
from pgqw.errors import UsageError
from pgqw.migrate import migrate
from pgqw.tasks import register_modules
from tests.lab import ROOT, new_database
from tests.lab.scenarios import DEMO, FAST, SCENARIOS, header
from tests.lab.stack import Stack


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    from pgqw.cli import Parser

    p = Parser(
        prog="./run evidence", description="Run the break-it scenarios with real API and worker processes, "
        "each in a scratch database, and write one file per scenario to docs/evidence/.")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"scenarios to run (default: all): {', '.join(SCENARIOS)}")
    p.add_argument("--fast", action="store_true", help="the test suite's short latencies instead of the demo's")
    p.add_argument("--out", default=str(ROOT / "docs" / "evidence"), help="folder to write to (default docs/evidence)")
    return p


def main(argv: list[str] | None = None) -> int:
    return cmd_evidence(build_parser().parse_args(argv))


def cmd_evidence(args: argparse.Namespace) -> int:
    names = args.names or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise UsageError(f"no scenario {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    profile = FAST if args.fast else DEMO
    admin = database_url(config.load())
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with psycopg.connect(admin, autocommit=True) as conn:
        server = conn.execute("show server_version").fetchone()[0]  # type: ignore[index]
    failed = 0
    for name in names:
        dbname = f"pgqw_evidence_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            new_database(conn, dbname)
        dsn = make_conninfo(admin, dbname=dbname)
        try:
            migrate(dsn)
            with psycopg.connect(dsn) as conn:  # the demo's task types, as `pgqw migrate` registers them
                register_modules(conn, ("pgqw.demo",))
            print(f"running {name} ({profile.name} settings)...", flush=True)
            with tempfile.TemporaryDirectory() as logs, Stack(dsn, Path(logs)) as stack:
                result = SCENARIOS[name](stack, profile)
            command = f"pgqw evidence {name}" + (" --fast" if args.fast else "")
            text = header(result, profile, command, _commit(), server) + result.text()
            (out_dir / f"{name}.txt").write_text(text)
            print(text)
        except Exception as exc:  # noqa: BLE001 - one scenario failing must not hide the others
            failed += 1
            print(f"{name}: FAILED: {exc}", flush=True)
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(dbname)))
    return 1 if failed else 0


if __name__ == "__main__":
    from pgqw.cli import run_repository_command

    sys.exit(run_repository_command("./run evidence", main))
