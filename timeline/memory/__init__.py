"""Memory pressure and container limits: the mem family (direct reclaim,
memcg reclaim and compaction stalls of the recorded threads, OOM kills) and
the cgroup family (the recorded processes' cgroups' throttling, memory
events and pressure, sampled).  Descriptors in family.py."""
