"""The names of the NCU metrics that liger-perf reads by name: shared by the profiler (``ncu``), the trial's
record (``record.schema``) and whoever reads it."""

#: NCU's warp-stall metrics (WarpStateStats: cycles stalled per issued instruction, by reason) are named
#: ``<STALL_PREFIX><reason><STALL_SUFFIX>``.
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
#: NCU's duration of one kernel launch, in nanoseconds.
NCU_DURATION = "gpu__time_duration.sum"
