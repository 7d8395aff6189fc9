"""Where a command's jobs run: on a Ray cluster (``--ray``), in worker processes of the scheduler's own
(``--processes``), or in the command's own process; with ``--workers`` CPUs of this machine."""

from __future__ import annotations

import argparse

from rollbox.scheduler import LocalWorker, Worker, machine_capacity, process_workers

from ._args import whole

__all__ = ["add_processes_option", "workers_for"]


def add_processes_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--processes",
        type=whole(0, 1024),
        default=0,
        metavar="N",
        help="run the jobs in N worker processes, each with a share of the CPUs (default 0: in this process; "
        "short jobs go faster in as many processes as CPUs)",
    )


def workers_for(args: argparse.Namespace) -> list[Worker]:
    """The workers that ``--ray``, ``--processes`` and ``--workers`` name.

    Raises:
        SchedulerError: the Ray cluster cannot be reached (its message says what to do).
    """
    if args.ray is not None:
        from rollbox.scheduler._ray import ray_workers

        return list(ray_workers(args.ray))
    budget = machine_capacity(cpus=args.workers)
    if args.processes:
        return list(process_workers(args.processes, budget))
    return [LocalWorker(capacity=budget)]
