"""``rollbox tasks synth`` (``rollbox synth`` until the ``tasks`` group lands): bug-fix tasks from real packages."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``synth`` subcommand to ``commands`` (the ``tasks`` group's subcommands, or the top level)."""
    del commands  # filled in with synthesis
