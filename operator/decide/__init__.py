"""Pure decisions: what a job needs next (assess), the queue's order and reservations, status
transitions as typed patches, the policy choices, the objects to create, the check of a worker's
report. Functions of immutable inputs and the time they are given; no I/O, no clock, no asyncio.

May import only `railyard.operator.base` and the pure core `railyard.topology`."""
