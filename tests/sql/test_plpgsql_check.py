"""plpgsql_check over every PL/pgSQL function of the queue: no error (a column, a variable or a type
that does not resolve, a wrong number of fields into a row) and no warning (an assignment that needs
a cast it does not have), caught before a call reaches the line. `warning extra` (a variable assigned
and never read, as enqueue_job's pg_notify answer) and performance notes are allowed. The extension
must be on the server (Debian: postgresql-15-plpgsql-check); where it is not, there is nothing to run."""
from __future__ import annotations

import psycopg

from tests.helpers import extension_missing, rows


def test_plpgsql_check_finds_no_error_or_warning_in_any_function(conn: psycopg.Connection) -> None:
    if not rows(conn, "select 1 from pg_available_extensions where name = 'plpgsql_check'"):
        extension_missing("plpgsql_check", "it is the linter this test runs")
    conn.execute("create extension if not exists plpgsql_check")
    found = rows(conn, """
        select p.oid::regprocedure::text as function, c.lineno, c.level, c.message, c.context
          from pg_proc p
          join pg_language l on l.oid = p.prolang and l.lanname = 'plpgsql'
          cross join lateral plpgsql_check_function_tb(p.oid, fatal_errors => false) c
         where p.pronamespace = current_schema()::regnamespace
           and c.level in ('error', 'warning')
         order by 1, 2""")
    checked = rows(conn, "select count(*) as n from pg_proc p join pg_language l on l.oid = p.prolang"
                         " where l.lanname = 'plpgsql' and p.pronamespace = current_schema()::regnamespace")
    assert checked[0]["n"] > 30
    assert found == []
