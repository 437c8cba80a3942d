"""The decisions of the placement loop over fixed streams (tests/support/stream.py): every job's Placed reason,
attempt and placement after every tick, digested. A restructure of the code must leave these digests as they
are; a change that means to change decisions updates them here, saying why in its commit."""

from __future__ import annotations

import pytest

from tests.support import stream

# (seed, hot spares per TOR) -> digest
EXPECTED = {
    (1, 0): "f8108ce20d79366d",
    (2, 0): "7a88dcb1eae6e998",
    (3, 0): "07a54f90cdb5e8ec",
    (4, 1): "b7a49044cb9cb7aa",
    (5, 1): "74af32ec1aeb8d24",
}


@pytest.mark.parametrize(("seed", "spares"), stream.STREAMS)
def test_the_decisions_over_a_fixed_stream_are_unchanged(seed, spares):
    assert stream.digest(stream.run(seed, spares=spares)) == EXPECTED[(seed, spares)]
