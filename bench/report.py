"""Turns the results of a run into the printed table, the target verdicts, docs/benchmarks.md and
the drain chart. The hand-written analysis in docs/benchmarks.md (between the notes markers) is
kept as it is when the file is written again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import brokers, peers
from .common import Results, Row

NOTES_START = "<!-- notes:start -->"
NOTES_END = "<!-- notes:end -->"

SECTION_TITLES = {
    "raw": "Raw ceiling",
    "enqueue": "Enqueue",
    "drain": "Drain",
    "peers": "Peers: procrastinate and pgqueuer",
    "brokers": "Peers on brokers: Celery and Dramatiq",
    "latency": "Latency",
    "delayed": "Delayed jobs and retries: lateness",
    "depth": "Depth",
    "bloat": "Bloat",
    "empty": "Empty queue after a big drain",
}


def fmt(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if unit in ("ms",):
        return f"{value:.2f}" if value < 100 else f"{value:,.0f}"
    if unit in ("dead/job", "blocks"):
        return f"{value:.2f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


# ----------------------------------------------------------------------------- targets


@dataclass
class Verdict:
    target: str
    measured: str
    goal: str
    met: bool | None          # None: not measured in this run
    gap: str                  # by how much it was missed (or the margin)


def _ratio_target(r: Results, name: str, key: str, base: str, goal: float) -> Verdict:
    value = r.ratio(key, base)
    if value is None:
        return Verdict(name, "not measured", f"≥ {goal:.0%}", None, "")
    met = value >= goal
    row, b = r.rows[key], r.rows[base]
    measured = f"{value:.0%} ({fmt(row.median)} vs {fmt(b.median)} {row.unit})"
    points = round(100 * abs(value - goal))
    gap = (f"margin {points} point{'s' if points != 1 else ''}" if met else
           f"missed by {points} point{'s' if points != 1 else ''} (needs {fmt(goal * b.median)} {row.unit}, "
           f"×{goal / value:.2f} the measured)")
    return Verdict(name, measured, f"≥ {goal:.0%}", met, gap)


def _ceiling_target(r: Results, name: str, key: str, goal: float, unit: str = "ms") -> Verdict:
    row = r.rows.get(key)
    if row is None or not row.values:
        return Verdict(name, "not measured", f"≤ {goal:g} {unit}", None, "")
    met = row.median <= goal
    gap = (f"margin {goal - row.median:.2f} {unit}" if met else
           f"missed by {row.median - goal:.2f} {unit} ({row.median / goal - 1:+.0%})")
    return Verdict(name, f"{fmt(row.median, unit)} {unit} (min {fmt(row.min, unit)}, max {fmt(row.max, unit)})",
                   f"≤ {goal:g} {unit}", met, gap)


def _profile_target(r: Results, name: str, key: str, base: str, field: str) -> Verdict:
    """key's figure (the median repetition's profile field) at most base's."""
    ours, theirs = _profile_median(r, key, field), _profile_median(r, base, field)
    if ours is None or theirs is None:
        return Verdict(name, "not measured", "≤ 1×", None, "")
    x = ours / theirs
    return Verdict(name, f"{ours:.3f} vs {theirs:.3f} ms ({x:.2f}×)", "≤ 1×", x <= 1,
                   f"margin {1 - x:.0%}" if x <= 1 else f"missed by {x - 1:.0%}")


def _profile_median(r: Results, key: str, field: str) -> float | None:
    values = sorted(p[field] for p in r.profiles.get(key, []) if isinstance(p.get(field), (int, float))
                    and not math.isnan(p[field]))
    return values[len(values) // 2] if values else None


def _ceiling_vs_target(r: Results, name: str, key: str, *others: str) -> Verdict:
    """key's median at most every other's (figures where lower is better)."""
    row = r.rows.get(key)
    theirs = [r.rows[o] for o in others if o in r.rows and r.rows[o].values]
    if row is None or not row.values or not theirs:
        return Verdict(name, "not measured", "≤ the peers'", None, "")
    best = min(theirs, key=lambda t: t.median)
    met = row.median <= best.median
    return Verdict(name, f"{fmt(row.median, 'ms')} vs {fmt(best.median, 'ms')} ms ({best.label.split(',')[0]})",
                   "≤ the peers'", met, f"margin {best.median - row.median:.2f} ms" if met
                   else f"missed by {row.median - best.median:.2f} ms ({row.median / best.median - 1:+.0%})")


def verdicts(r: Results) -> list[Verdict]:
    procs = r.facts.get("sizes", {}).get("procs", [4])
    p = max(procs) if procs else 4
    poll_ms = r.facts.get("sizes", {}).get("poll_interval_ms", 1000)
    out = [
        _ratio_target(r, f"One job per claim, {p} workers: ≥ 60 % of the raw single-claim ceiling",
                      f"worker.single.p{p}", f"raw.single.p{p}", 0.60),
        _ratio_target(r, f"Batch claiming, {p} workers: ≥ 25 % of the raw batch ceiling",
                      f"worker.batch.p{p}", f"raw.batch.p{p}", 0.25),
    ]
    single, batch = r.rows.get(f"worker.single.p{p}"), r.rows.get(f"worker.batch.p{p}")
    if single and batch and single.values and batch.values:
        x = batch.median / single.median
        out.append(Verdict(f"Batch claiming, {p} workers: ≥ 3× our own single-claim figure",
                           f"{x:.2f}× ({fmt(batch.median)} vs {fmt(single.median)} jobs/s)", "≥ 3×", x >= 3,
                           f"margin {x - 3:+.2f}×" if x >= 3 else f"missed by {3 - x:.2f}×"))
    else:
        out.append(Verdict("Batch claiming: ≥ 3× our own single-claim figure", "not measured", "≥ 3×", None, ""))
    out += [
        _ratio_target(r, "enqueue_job: ≥ 70 % of a raw single insert", "fn.enqueue_job", "raw.insert.single", 0.70),
        _ratio_target(r, "enqueue_jobs: ≥ 50 % of a raw batch insert", "fn.enqueue_jobs", "raw.insert.batch", 0.50),
        _ratio_target(r, "HTTP API: ≥ 40 % of enqueue_job", "api.enqueue", "fn.enqueue_job", 0.40),
        _ceiling_target(r, "Latency with LISTEN at 50 jobs/s: p50 ≤ 3 ms", "worker.latency.listen.p1.p50", 3),
        _ceiling_target(r, "Latency with LISTEN at 50 jobs/s: p99 ≤ 15 ms", "worker.latency.listen.p1.p99", 15),
        _ceiling_target(r, f"Polling only ({poll_ms} ms): p50 ≤ half the poll interval",
                        "worker.latency.poll.p1.p50", poll_ms / 2),
        _ceiling_target(r, "Delayed jobs and retries start on time (LISTEN): lateness p50 ≤ 50 ms",
                        "worker.delayed.listen.p50", 50),
        _ceiling_target(r, "Delayed jobs and retries start on time (LISTEN): lateness p99 ≤ 250 ms",
                        "worker.delayed.listen.p99", 250),
        _ratio_target(r, "Depth: claim rate at the deep backlog ≥ 80 % of the rate at the small one",
                      "depth.large", "depth.small", 0.80),
    ]
    # The runtime and the functions against the peers, the brokers and the raw ceiling of the same run.
    out += [
        _ratio_target(r, f"pgqw worker, concurrency 10, batch claims, {p} proc: ≥ 1.3 × pgqueuer's drain at its defaults",
                      f"worker.c10.batch.p{p}", f"peer.pgqueuer.drain.default.p{p}", 1.3),
        _ratio_target(r, f"pgqw worker at its default concurrency, batch claims, {p} proc: ≥ 2 × pgqueuer's drain "
                         "at its defaults", f"worker.batch.p{p}", f"peer.pgqueuer.drain.default.p{p}", 2.0),
        _profile_target(r, f"pgqw worker, concurrency 10, batch claims, {p} proc: server CPU per job ≤ pgqueuer's",
                        f"worker.c10.batch.p{p}", f"peer.pgqueuer.drain.default.p{p}", "server_cpu_ms_per_job"),
        _ratio_target(r, f"pgqw worker, concurrency 10, batch claims, {p} proc: ≥ 8 × Celery on Redis",
                      f"worker.c10.batch.p{p}", f"broker.celery-redis.drain.p{p}", 8.0),
        _ratio_target(r, f"pgqw worker, concurrency 10, batch claims, {p} proc: ≥ 3.5 × Celery on RabbitMQ",
                      f"worker.c10.batch.p{p}", f"broker.celery-rabbitmq.drain.p{p}", 3.5),
        _ceiling_vs_target(r, "Latency with LISTEN, 1 proc: p50 ≤ pgqueuer's", "worker.latency.listen.p1.p50",
                           "peer.pgqueuer.latency.p1.p50"),
        _ceiling_vs_target(r, "Latency with LISTEN, 1 proc: p99 the lowest of the peers", "worker.latency.listen.p1.p99",
                           *(k for k in r.rows if k.startswith("peer.") and k.endswith(".latency.p1.p99"))),
        _ceiling_target(r, "Row versions made dead per job ≤ 2.0", "bloat.dead_per_job", 2.0, "dead/job"),
        _ratio_target(r, "enqueue_jobs: ≥ 60 % of a raw batch insert", "fn.enqueue_jobs", "raw.insert.batch", 0.60),
        _ratio_target(r, f"pgqw worker, concurrency 1, {p} proc: ≥ 1.5 × procrastinate's drain at concurrency 1",
                      f"worker.c1.single.p{p}", f"peer.procrastinate.drain.c1.p{p}", 1.5),
        _ratio_target(r, f"Stored functions, 1 per claim, {p} proc: ≥ 60 % of the raw single-claim ceiling",
                      f"fn.single.p{p}", f"raw.single.p{p}", 0.60),
        _ceiling_target(r, f"Stored functions, 1 per claim, {p} proc: server CPU per job ≤ 0.6 ms",
                        f"fn.single.p{p}.server_cpu", 0.6),
        _ratio_target(r, f"Stored functions, 100 per claim, {p} proc: ≥ 50 % of the raw batch ceiling",
                      f"fn.batch.p{p}", f"raw.batch.p{p}", 0.50),
        _ratio_target(r, "enqueue_job: ≥ 80 % of a raw single insert", "fn.enqueue_job", "raw.insert.single", 0.80),
        _ratio_target(r, "HTTP API: ≥ 50 % of enqueue_job", "api.enqueue", "fn.enqueue_job", 0.50),
    ]
    idle = r.rows.get("idle.listen.claims_per_s")
    if idle and idle.values:
        out.append(Verdict(f"Idle pool, {p} workers listening: no claim while nothing is enqueued",
                           f"{idle.median:.2f} claims/s (max {max(idle.values):.2f})", "0 claims", max(idle.values) == 0,
                           "" if max(idle.values) == 0 else f"{max(idle.values):.2f} claims/s too many"))
    else:
        out.append(Verdict("Idle pool: no claim while nothing is enqueued", "not measured", "0 claims", None, ""))
    if "depth.large.batch" in r.rows:
        out.append(_ratio_target(r, "Depth, claiming as a worker with free slots does (claim_jobs): the same ≥ 80 %",
                                 "depth.large.batch", "depth.small.batch", 0.80))
    return out


# ----------------------------------------------------------------------------- printed table


def table_lines(r: Results) -> list[str]:
    head = f"{'figure':<78} {'median':>10} {'min':>10} {'max':>10} {'unit':<8} {'× raw':>8}  raw figure"
    lines = [head, "-" * len(head)]
    section = None
    for row in r.rows.values():
        if row.section != section:
            section = row.section
            lines.append(f"[{SECTION_TITLES.get(section, section)}]")
        ratio = r.ratio(row.key)
        lines.append(f"{row.label[:78]:<78} {fmt(row.median, row.unit):>10} {fmt(row.min, row.unit):>10} "
                     f"{fmt(row.max, row.unit):>10} {row.unit:<8} "
                     f"{(f'{ratio:.2f}' if ratio is not None else '–'):>8}  {row.baseline or ''}")
    lines += peers.table_lines(r)
    lines += brokers.table_lines(r)
    lines.append("")
    lines.append("Targets:")
    for v in verdicts(r):
        mark = {True: "MET   ", False: "MISSED", None: "n/a   "}[v.met]
        lines.append(f"  {mark} {v.target}: {v.measured} (goal {v.goal}) {v.gap}")
    if r.errors:
        lines.append("")
        lines.append("Problems seen during the run:")
        lines += [f"  - {e}" for e in r.errors]
    return lines


# ----------------------------------------------------------------------------- chart


def chart(r: Results, path: Path) -> bool:
    """Throughput against processes (left) and the ratio to the raw ceiling (right)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    procs = r.facts.get("sizes", {}).get("procs", [1, 2, 4])
    series = [
        ("raw.single", "raw, 1 per claim", "#888888", "--", "o"),
        ("raw.batch", "raw, 100 per claim", "#444444", "--", "s"),
        ("fn.single", "our functions, 1 per claim", "#6baed6", ":", "o"),
        ("fn.batch", "our functions, 100 per claim", "#2171b5", ":", "s"),
        ("worker.single", "pgqw worker, 1 per claim", "#fd8d3c", "-", "o"),
        ("worker.batch", "pgqw worker, batch claim", "#d94801", "-", "s"),
    ]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 5.6))
    for prefix, label, color, style, marker in series:
        xs, med, lo, hi = [], [], [], []
        for p in procs:
            row = r.rows.get(f"{prefix}.p{p}")
            if row and row.values:
                xs.append(p)
                med.append(row.median)
                lo.append(row.median - row.min)
                hi.append(row.max - row.median)
        if xs:
            ax.errorbar(xs, med, yerr=[lo, hi], label=label, color=color, linestyle=style, marker=marker, capsize=3)
    ax.set_yscale("log")
    ax.set_xticks(procs)
    ax.set_xlabel("processes (clients or pgqw worker processes)")
    ax.set_ylabel("jobs per second (median, min–max)")
    ax.set_title("Drain throughput")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    for prefix, base, label, color, goal in (
        ("worker.single", "raw.single", "worker, 1 per claim ÷ raw 1 per claim", "#fd8d3c", 0.60),
        ("worker.batch", "raw.batch", "worker, batch ÷ raw 100 per claim", "#d94801", 0.25),
        ("fn.single", "raw.single", "functions, 1 per claim ÷ raw", "#6baed6", None),
        ("fn.batch", "raw.batch", "functions, 100 per claim ÷ raw", "#2171b5", None),
    ):
        xs, ys = [], []
        for p in procs:
            v = r.ratio(f"{prefix}.p{p}", f"{base}.p{p}")
            if v is not None:
                xs.append(p)
                ys.append(100 * v)
        if xs:
            ax2.plot(xs, ys, marker="o", color=color, label=label,
                     linestyle="-" if prefix.startswith("worker") else ":")
        if goal is not None:
            ax2.axhline(100 * goal, color=color, linewidth=0.8, linestyle="--")
    ax2.set_xticks(procs)
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("processes")
    ax2.set_ylabel("% of the raw ceiling at the same process count")
    ax2.set_title("Ratio to the raw ceiling (dashed: targets at 4 workers)")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    facts = r.facts
    fig.suptitle(f"pg-queue-worker drain, {facts.get('sizes', {}).get('drain_jobs', '?'):,} noop jobs — commit "
                 f"{facts.get('commit', '?')}, {facts.get('machine', {}).get('cpus', '?')} CPUs, "
                 f"PostgreSQL {facts.get('server', {}).get('server_version', '?')}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ----------------------------------------------------------------------------- markdown


def _md_rows(r: Results, rows: list[Row]) -> list[str]:
    out = ["| figure | median | min | max | unit | ratio | compared with |", "|---|---:|---:|---:|---|---:|---|"]
    for row in rows:
        ratio = r.ratio(row.key)
        base = r.rows.get(row.baseline or "")
        base_label = "itself (the ceiling)" if row.baseline == row.key else (base.label if base else "–")
        out.append(f"| {row.label} | {fmt(row.median, row.unit)} | {fmt(row.min, row.unit)} | {fmt(row.max, row.unit)} "
                   f"| {row.unit} | {f'{ratio:.2f}' if ratio is not None else '–'} | {base_label} |")
    return out


def _profile_lines(r: Results) -> list[str]:
    keys = [k for k in r.profiles if k.startswith("worker.") and r.profiles[k]
            and "worker_cpu_ms_per_job" in r.profiles[k][0]]
    if not keys:
        return []
    out = [
        "| drain | jobs/s (median) | worker CPU ms/job | server CPU ms/job | machine busy | transactions/job "
        "| function calls/job | dead tuples/job (jobs, attempts) |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]

    def med(values: list[float]) -> float:
        values = sorted(v for v in values if v is not None and not math.isnan(v))
        return values[len(values) // 2] if values else float("nan")

    for key in keys:
        reps: list[dict] = r.profiles[key]
        calls: dict[str, list[float]] = {}
        for p in reps:
            for fn, n in p.get("calls_per_job", {}).items():
                calls.setdefault(fn, []).append(n)
        call_text = ", ".join(f"{fn} {med(v):.2f}" for fn, v in sorted(calls.items()))
        row = r.rows.get(key)
        out.append(
            f"| {row.label if row else key} | {fmt(row.median) if row else '–'} "
            f"| {med([p['worker_cpu_ms_per_job'] for p in reps]):.3f} "
            f"| {med([p['server_cpu_ms_per_job'] for p in reps]):.3f} "
            f"| {med([p['machine_busy_pct'] or float('nan') for p in reps]):.0f} % "
            f"| {med([p['transactions_per_job'] for p in reps]):.2f} | {call_text} "
            f"| {med([p['dead_tuples_per_job'].get('jobs', float('nan')) for p in reps]):.2f}, "
            f"{med([p['dead_tuples_per_job'].get('job_attempts', float('nan')) for p in reps]):.2f} |")
    return out


def markdown(r: Results, *, command: str, notes: str, chart_path: str | None, lines_extra: Callable[[], list[str]] | None = None) -> str:
    f = r.facts
    machine, server = f.get("machine", {}), f.get("server", {})
    out = [
        "# Benchmarks",
        "",
        "Generated by the benchmark suite (`bench/`, `pgqw bench`); the hand-written analysis is at the end, "
        "between the notes markers, and is kept when the file is generated again.",
        "Every figure is the median of "
        f"{f.get('sizes', {}).get('reps', '?')} repetitions with min and max, and its ratio to the raw "
        "SKIP LOCKED ceiling measured in the same run (this machine is shared: absolute numbers drift, "
        "ratios much less).",
        "",
        "## How it was measured",
        "",
        f"- Command: `{command}`",
        f"- Commit: `{f.get('commit', '?')}`{' (with uncommitted changes in ' + ', '.join(f['dirty']) + ')' if f.get('dirty') else ''}, "
        f"measured {f.get('started_at', '?')}, run took {f.get('duration_s', 0) / 60:.1f} min",
        f"- Machine: {machine.get('cpus', '?')} CPUs ({machine.get('cpu_model', '?')}), "
        f"{machine.get('memory_gib', '?')} GiB RAM, Linux {machine.get('kernel', '?')}, Python {machine.get('python', '?')}; "
        f"load average {machine.get('load_start', '?')} at start, {machine.get('load_end', '?')} at the end. "
        "Shared: the clients, the worker processes and PostgreSQL all run on these cores.",
        f"- Server: {server.get('version', '?')} ({f.get('server_kind', '?')})",
        "- Server settings: " + ", ".join(f"`{k} = {v}`" for k, v in server.get("settings", {}).items()),
        "- Hot tables as the migration leaves them: "
        + "; ".join(f"`{t}`: {', '.join(opts) if opts else 'defaults'}" for t, opts in f.get("reloptions", {}).items()),
        f"- Sizes: {f.get('sizes_text', '')}",
        f"- Workers: `pgqw worker` processes running the noop task, `WORKER_CONCURRENCY={f.get('sizes', {}).get('worker_concurrency', '?')}`, "
        "`SIM_MIN_LATENCY_MS=0 SIM_MAX_LATENCY_MS=0 SIM_FAILURE_RATE=0`, `WORKER_LISTEN=1` unless said, "
        "`WORKER_BATCH_CLAIM=0` (1 per claim) or `1` (batch claim); measured from the database: jobs ÷ (last "
        "attempt finished − first attempt started).",
        "- Durability: " + f.get("durability", ""),
        "",
        "## Targets",
        "",
        "| target | measured | goal | verdict |",
        "|---|---|---|---|",
    ]
    for v in verdicts(r):
        verdict = {True: "**met**", False: "**missed**", None: "not measured"}[v.met]
        out.append(f"| {v.target} | {v.measured} | {v.goal} | {verdict}{': ' + v.gap if v.gap else ''} |")
    out.append("")
    out.append("## Results")
    for section, title in SECTION_TITLES.items():
        rows = [row for row in r.rows.values() if row.section == section]
        if not rows and not (section == "brokers" and r.facts.get("brokers")):  # a skipped broker still says so
            continue
        out += ["", f"### {title}", ""] + (_md_rows(r, rows) if rows else [])
        if section == "drain" and chart_path:
            out += ["", f"![throughput against worker processes]({chart_path})"]
        if section == "latency":
            lat = [k for k in r.profiles if k.startswith("worker.latency.")]
            if lat:
                out += ["", "Claims per job during the latency runs (pg_stat_user_functions): with LISTEN every "
                        "notification wakes every worker, and every freed slot claims again.", "",
                        "| run | claim_jobs calls per job | server ms in claim_jobs per job |", "|---|---:|---:|"]
                for k in lat:
                    reps = r.profiles[k]
                    calls = sorted(p["claim_calls_per_job"] for p in reps)[len(reps) // 2]
                    ms = sorted(p["claim_ms_per_job"] for p in reps)[len(reps) // 2]
                    out.append(f"| {k.replace('worker.latency.', '')} | {calls:.2f} | {ms:.3f} |")
        if section == "peers":
            out += peers.markdown_lines(r)
        if section == "brokers":
            out += brokers.markdown_lines(r)
        if section == "drain":
            prof = _profile_lines(r)
            if prof:
                out += ["", "Where the time goes (medians over the repetitions; CPU from /proc, transactions from "
                        "pg_stat_database, calls from pg_stat_user_functions; the server's CPU and transactions also "
                        "hold the one enqueue transaction that starts each drain, and anything else the shared "
                        "server did meanwhile):", ""] + prof
    if lines_extra:
        out += lines_extra()
    if r.errors:
        out += ["", "## Problems seen during the run", ""] + [f"- {e}" for e in r.errors]
    out += ["", NOTES_START, notes.strip("\n"), NOTES_END, ""]
    return "\n".join(out)


def existing_notes(path: Path) -> str:
    try:
        text = path.read_text()
    except OSError:
        return ""
    if NOTES_START in text and NOTES_END in text:
        return text.split(NOTES_START, 1)[1].split(NOTES_END, 1)[0]
    return ""
