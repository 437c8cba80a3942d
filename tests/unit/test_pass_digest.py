"""The decisions of the placement loop over fixed streams (tests/support/stream.py): every job's Placed reason,
attempt and placement after every tick, digested. A restructure of the code must leave these digests as they
are; a change that means to change decisions updates them here, saying why in its commit."""

from __future__ import annotations

import pytest

from tests.support import stream

# (seed, hot spares per TOR) -> digest
EXPECTED = {
    (1, 0): "0563dca49e785942",
    (2, 0): "c5f7ec22c3d282cb",
    (3, 0): "07a54f90cdb5e8ec",
    (4, 1): "bb31c43519c394b8",
    (5, 1): "c829f4e27e321cc7",
}


@pytest.mark.parametrize(("seed", "spares"), stream.STREAMS)
def test_the_decisions_over_a_fixed_stream_are_unchanged(seed, spares):
    assert stream.digest(stream.run(seed, spares=spares)) == EXPECTED[(seed, spares)]
