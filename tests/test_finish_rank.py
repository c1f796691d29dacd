"""A rank's finished phases: the cross-rank step's waits go into them, and where there are none
the table built in the rank's own worker (``RankWork.provisional``) is the same as one built
again with zero waits."""

from __future__ import annotations

import numpy as np

from conftest import DEMO2

from tracerecon import pipeline
from tracerecon.analysis.config import PhaseConfig
from tracerecon.analysis.phases import build_phases
from tracerecon.analysis.rank import finish_rank


def _rank_work():
    f = DEMO2 / "nccl_skew" / "rank1.sqlite"
    out, _, _ = pipeline._file_work_uncached(f, PhaseConfig(), True, 1, 1)
    return out[0][2]


def test_given_no_waits_or_zero_waits_then_the_phases_are_the_provisional_ones_and_equal_a_rebuild():
    # GIVEN one rank of a 2-GPU NCCL run, analysed alone (its provisional phases built there)
    work = _rank_work()
    n = len(work.phase_inputs.phase_rows)
    assert n > 50
    rebuilt = build_phases(work.phase_inputs, np.zeros(n, np.int64))
    # WHEN it is finished with no waits (one rank) and with zero waits (never waited)
    for wait in (None, np.zeros(n, np.int64)):
        phases, cycles = finish_rank(work, wait)
        # THEN the phases are the table its worker built, equal to one built again
        assert phases is work.provisional
        assert phases.equals(rebuilt)
        assert cycles.num_rows > 0


def test_given_waits_then_they_are_in_the_phases_and_their_causes():
    # GIVEN the same rank and a wait of 1 ms in every other phase
    work = _rank_work()
    n = len(work.phase_inputs.phase_rows)
    wait = np.where(np.arange(n) % 2 == 0, 1_000_000, 0).astype(np.int64)
    # WHEN it is finished with them
    phases, _ = finish_rank(work, wait)
    # THEN the phases carry exactly those waits, and only phases that waited say comm_wait
    assert phases["wait_ns"].to_pylist() == wait.tolist()
    causes = phases["cause"].to_pylist()
    assert all(c != "comm_wait" for c, w in zip(causes, wait.tolist()) if w == 0)
    assert phases is not work.provisional
