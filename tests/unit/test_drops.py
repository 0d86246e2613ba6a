"""Records lost between the BPF programs and the rings: never caused by the consumer, counted by cause."""
from timeline.commands.record import drop_warnings


def _causes(full, refused, retried=(0, 0), max_pending=0, ring=16 << 20):
    return {"full": list(full), "refused": list(refused), "retried": list(retried),
            "refused_max_pending": max_pending, "ring_bytes": ring}


def test_summary_tells_a_full_ring_from_a_refusal():
    causes = {"sched": _causes([5, 7], [0, 3], max_pending=1 << 20), "proc": _causes([0, 1], [0, 0], [9, 0])}
    drops = {k: sum(c["full"]) + sum(c["refused"]) for k, c in causes.items()}
    full, refused = drop_warnings(drops, causes)
    assert full.startswith("13 events were dropped (ring buffer full): sched 12, proc 1;")
    # the fix names the rings that filled: twice their size now
    assert full.endswith("try a larger --buffer-size sched=32,proc=32")
    # 1 MiB pending of a 16 MiB ring at worst
    assert refused.startswith("3 events were refused by the kernel with the ring at most 6.2% full: sched 3;")
    assert "does not help" in refused
    # retried reserves lost nothing: no line for them
    assert drop_warnings({"sched": 0}, {"sched": _causes([0, 0], [0, 0], [4, 4])}) == []


def test_summary_of_a_result_without_causes_counts_all_as_full():
    assert drop_warnings({"sched": 2, "proc": 0}, {}) == [
        "2 events were dropped (ring buffer full): sched 2; try a larger --buffer-size sched=MiB"]


def test_drop_advice_names_each_ring_and_its_size():
    causes = {"cuda": _causes([3, 0], [0, 0], ring=16 << 20), "counters": _causes([0, 1], [0, 0], ring=1 << 18)}
    drops = {k: sum(c["full"]) for k, c in causes.items()}
    (full,) = drop_warnings(drops, causes)
    assert full == ("4 events were dropped (ring buffer full): cuda 3, counters 1; "
                    "try a larger --buffer-size cuda=32,counters=1")
