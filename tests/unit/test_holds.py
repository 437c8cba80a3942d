"""Holds and moves end when their reason ends, not only by time (decide/holds.py)."""

from __future__ import annotations

from typing import Any

from railyard.operator.base.objects import parse_job
from railyard.operator.decide.holds import Hold, PendingMove, expire, settle_moves

from tests.support.jobs import make_job


def _job(name: str, nodes: list[str] | None = None, restart_count: int = 0) -> Any:
    body = make_job(name, max(1, len(nodes or [])))
    body["metadata"].update(namespace="default", uid=f"uid-{name}", generation=1)
    if nodes is not None:
        ranks = [{"rank": i, "node": n, "gpus": [0], "pod": f"{name}-{i}"} for i, n in enumerate(nodes)]
        body["status"] = {"restartCount": restart_count, "placement": {"id": "p", "ranks": ranks}}
    return parse_job(body)


def test_a_hold_on_a_node_no_longer_usable_ends_at_once_without_cooling():
    waiting = _job("w")
    hold = Hold(frozenset({"n1", "n2"}), ("default/v",), until=1000.0)
    kept, done, timed_out = expire({waiting.key: hold}, {waiting.key: waiting}, 10.0, 600, lambda n: n != "n2")
    assert not kept and done == [waiting.key] and not timed_out
    kept, done, timed_out = expire({waiting.key: hold}, {waiting.key: waiting}, 10.0, 600, lambda n: True)
    assert kept == {waiting.key: hold} and not done


def test_a_spare_hold_is_not_ended_by_the_loss_it_answers():
    running = _job("r", ["n1"])
    hold = Hold(frozenset({"n9"}), ("default/b",), until=1000.0, spare=True)
    kept, done, _ = expire({running.key: hold}, {running.key: running}, 10.0, 600, lambda n: n != "n9")
    assert kept == {running.key: hold} and not done


def test_a_mover_restarted_for_another_reason_but_still_there_keeps_its_move():
    waiting = _job("w")
    move = PendingMove(frozenset({"n1"}), waiting.key, restart_count=0, until=1000.0)
    stayed = _job("m", ["n1", "n2"], restart_count=1)  # a process failure restarted it in place
    done, off = settle_moves({stayed.key: move}, {stayed.key: stayed, waiting.key: waiting}, 10.0)
    assert not done and not off
    moved = _job("m", ["n3", "n2"], restart_count=1)
    done, off = settle_moves({moved.key: move}, {moved.key: moved, waiting.key: waiting}, 10.0)
    assert done == [moved.key] and not off
