"""The peers section's plumbing, without running the peers (they take minutes: `pgqw bench --only peers`)."""
from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict

from bench import peers, report
from bench.common import PROFILES, Results
from bench.sections import RUNNERS, SECTIONS


def test_peers_section_is_registered_and_left_out_of_the_smoke_profile() -> None:
    assert "peers" in SECTIONS and RUNNERS["peers"] is peers.section_peers
    assert PROFILES["full"].peers and PROFILES["quick"].peers and not PROFILES["tiny"].peers


def test_peers_asyncpg_dsn_keeps_every_part_of_a_conninfo() -> None:
    url = peers.asyncpg_dsn("host=127.0.0.1 port=5433 user=post@gres password=p/w dbname=pgqw_bench_peer_x")
    assert url == "postgresql://post%40gres:p%2Fw@127.0.0.1:5433/pgqw_bench_peer_x"
    assert conninfo_to_dict(url) == {"host": "127.0.0.1", "port": "5433", "user": "post@gres", "password": "p/w",
                                     "dbname": "pgqw_bench_peer_x"}
    socket = peers.asyncpg_dsn("postgresql://postgres@/db?host=/tmp/sock&port=5432")
    assert conninfo_to_dict(socket) == {"host": "/tmp/sock", "port": "5432", "user": "postgres", "dbname": "db"}


def test_peers_rows_are_compared_with_ours_and_the_raw_ceiling() -> None:
    r = Results(facts={"peers": peers.settings_facts(4)})
    r.add("raw.single.p4", "raw", "raw 1", "jobs/s", 2000, baseline="raw.single.p4")
    r.add("raw.batch.p4", "raw", "raw 100", "jobs/s", 80000, baseline="raw.batch.p4")
    r.add("worker.single.p4", "drain", "pgqw worker, 1 per claim, 4 proc", "jobs/s", 1200, baseline="raw.single.p4")
    r.add("worker.batch.p4", "drain", "pgqw worker, batch claim, 4 proc", "jobs/s", 8000, baseline="raw.batch.p4")
    r.add("peer.procrastinate.drain.c1.p4", "peers", "procrastinate, c1", "jobs/s", 600, baseline="raw.single.p4")
    r.add("peer.pgqueuer.drain.default.p4", "peers", "pgqueuer, defaults", "jobs/s", 4000, baseline="raw.batch.p4")
    r.add("peer.pgqueuer.enqueue.single", "peers", "pgqueuer, 1 per call", "jobs/s", 900, baseline="raw.insert.single")

    assert peers.comparisons(r) == [("peer.procrastinate.drain.c1.p4", "worker.single.p4", "procrastinate, c1"),
                                    ("peer.pgqueuer.drain.default.p4", "worker.batch.p4", "pgqueuer, defaults")]
    assert r.ratio("peer.procrastinate.drain.c1.p4") == 0.3
    printed = "\n".join(report.table_lines(r))
    assert "[Peers: procrastinate and pgqueuer]" in printed and "Ours ÷ peer" in printed and " 2.00" in printed
    text = report.markdown(r, command="pgqw bench", notes="", chart_path=None)
    assert "### Peers: procrastinate and pgqueuer" in text
    assert "| pgqw worker, batch claim, 4 proc | 8,000 jobs/s | pgqueuer, defaults | 4,000 jobs/s | 2.00 |" in text
    assert "procrastinate --app bench.peers.procrastinate_app worker --concurrency 1" in text
