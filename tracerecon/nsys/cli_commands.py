"""Subcommands that drive Nsight Systems itself: run, scrub."""

from __future__ import annotations

import argparse


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    return None
