"""Reading the job store: jobs, results, transitions, attempts and counts, each from one consistent snapshot."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from ._db import JOB_COLUMNS, RESULT_COLUMNS, Database, job_from_row, result_from_row
from ._errors import JobNotFound
from ._model import Attempt, Job, JobResult, Transition
from ._states import JobState

__all__ = ["StoreReads"]


class StoreReads:
    """The read side of :class:`JobStore`."""

    db: Database
    location: str

    # -- reading ----------------------------------------------------------------------------------------------

    def job(self, job_id: int) -> Job:
        """The job with this id.

        Raises:
            JobNotFound: there is none.
        """
        with self.db.read() as db:
            row = db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(f"no job {job_id} in {self.location}; list them with 'rollbox jobs'")
        return job_from_row(row)

    def jobs(
        self,
        *,
        run_id: str | None = None,
        state: JobState | None = None,
        tenant: str | None = None,
        limit: int | None = None,
    ) -> list[Job]:
        """Jobs in id order, of one run, in one state and of one tenant when given."""
        where, args = _filters(run_id=run_id, state=state, tenant=tenant)
        bound = "" if limit is None else f" LIMIT {int(limit)}"
        with self.db.read() as db:
            rows = db.execute(f"SELECT {JOB_COLUMNS} FROM jobs {where} ORDER BY id{bound}", args).fetchall()
        return [job_from_row(row) for row in rows]

    def result(self, job_id: int) -> JobResult | None:
        """The job's result, or ``None`` while it has none."""
        with self.db.read() as db:
            row = db.execute(f"SELECT {RESULT_COLUMNS} FROM results WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else result_from_row(row)

    def results(
        self, *, run_id: str | None = None, tenant: str | None = None, after: int = 0
    ) -> list[tuple[Job, JobResult]]:
        """Results in commit order (those committed after sequence number ``after``), with their jobs (of one run
        and one tenant when given)."""
        where, args = _filters(run_id=run_id, tenant=tenant, prefix="j.")
        where = f"{where} AND r.seq > ?" if where else "WHERE r.seq > ?"
        columns = ", ".join(f"j.{c.strip()}" for c in JOB_COLUMNS.split(","))
        results = ", ".join(f"r.{c.strip()}" for c in RESULT_COLUMNS.split(","))
        with self.db.read() as db:
            rows = db.execute(
                f"SELECT {columns}, {results} FROM results r JOIN jobs j ON j.id = r.job_id {where} ORDER BY r.seq",
                (*args, after),
            ).fetchall()
        width = len(JOB_COLUMNS.split(","))
        return [(job_from_row(row[:width]), result_from_row(row[width:])) for row in rows]

    def transitions(self, job_id: int) -> list[Transition]:
        """Every move of the job, in order."""
        with self.db.read() as db:
            rows = db.execute(
                "SELECT job_id, attempt, source, target, at, reason FROM transitions WHERE job_id = ? "
                f"ORDER BY {self.db.dialect.insertion}",
                (job_id,),
            ).fetchall()
        return [Transition(j, a, s and JobState(s), JobState(t), at, r) for j, a, s, t, at, r in rows]

    def attempts(self, job_id: int) -> list[Attempt]:
        """Every attempt of the job, in order."""
        with self.db.read() as db:
            rows = db.execute(
                "SELECT job_id, number, owner, worker, started_at, ended_at, outcome, error FROM attempts "
                "WHERE job_id = ? ORDER BY number",
                (job_id,),
            ).fetchall()
        return [Attempt(*row) for row in rows]

    def counts(self, run_id: str | None = None, *, tenant: str | None = None) -> dict[str, int]:
        """How many jobs (of one run and one tenant, when given) are in each state, plus ``infra_error``: completed
        jobs whose result is one."""
        where, args = _filters(run_id=run_id, tenant=tenant)
        with self.db.read() as db:
            counts = dict(db.execute(f"SELECT state, COUNT(*) FROM jobs {where} GROUP BY state", args).fetchall())
            where, args = _filters(run_id=run_id, tenant=tenant, prefix="j.")
            infra = f"{where} AND r.status = 'infra_error'" if where else "WHERE r.status = 'infra_error'"
            (counts["infra_error"],) = db.execute(
                f"SELECT COUNT(*) FROM results r JOIN jobs j ON j.id = r.job_id {infra}", args
            ).fetchone()
        return counts

    def runs(self, *, tenant: str | None = None) -> list[tuple[str, float, dict[str, Any], dict[str, int]]]:
        """Every run: its id, when it was made, what it is, and its jobs counted by state; with ``tenant``, only the
        runs that hold jobs of that tenant, and only those jobs counted (a run's name is not its own: two tenants
        may both use ``nightly``, or the service's default run)."""
        where, args = _filters(tenant=tenant)
        with self.db.read() as db:
            runs = db.execute("SELECT id, created_at, meta FROM runs ORDER BY created_at").fetchall()
            counts: dict[str, dict[str, int]] = {}
            for run_id, state, count in db.execute(
                f"SELECT run_id, state, COUNT(*) FROM jobs {where} GROUP BY run_id, state", args
            ):
                counts.setdefault(run_id, {})[state] = count
        shown = [(id_, at, meta) for id_, at, meta in runs if tenant is None or id_ in counts]
        return [(id_, at, json.loads(meta), counts.get(id_, {})) for id_, at, meta in shown]

    def run_meta(self, run_id: str) -> dict[str, Any] | None:
        """What :meth:`set_run_meta` recorded for the run, ``None`` for no such run."""
        with self.db.read() as db:
            row = db.execute("SELECT meta FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def pending_by_pool(self, runs: Collection[str] | None = None) -> dict[str, int]:
        """How many jobs wait in the queue for each warm pool."""
        where, args = "WHERE state = 'pending'", []
        if runs is not None:
            where += f" AND run_id IN ({','.join('?' * len(runs))})"
            args = list(runs)
        with self.db.read() as db:
            return dict(db.execute(f"SELECT pool, COUNT(*) FROM jobs {where} GROUP BY pool", args).fetchall())

    def unfinished(self, runs: Collection[str] | None = None) -> int:
        """How many jobs (of these runs) are not final yet."""
        where, args = "", list(runs or ())
        if runs is not None:
            where = f"run_id IN ({','.join('?' * len(args))}) AND "
        with self.db.read() as db:
            (count,) = db.execute(
                f"SELECT COUNT(*) FROM jobs WHERE {where}"
                "state NOT IN ('completed', 'failed', 'timed_out', 'cancelled')",
                args,
            ).fetchone()
        return int(count)


def _filters(
    *, run_id: str | None = None, state: JobState | None = None, tenant: str | None = None, prefix: str = ""
) -> tuple[str, list[Any]]:
    clauses, args = [], []
    if run_id is not None:
        clauses.append(f"{prefix}run_id = ?")
        args.append(run_id)
    if tenant is not None:
        clauses.append(f"{prefix}tenant = ?")
        args.append(tenant)
    if state is not None:
        clauses.append(f"{prefix}state = ?")
        args.append(state.value)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), args
