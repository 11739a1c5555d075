"""The benchmark program and its run loop.

``main`` (absl entry: list or run, exit code), ``flags`` (command-line flags -> ``RunConfig``),
``config`` (``RunConfig``), ``benchmark`` (per case: setup once, timed rounds per reader, publish),
``storage`` (local endpoint, emulator or real bucket), ``bucket_type`` (the bucket type in case
names), ``manifest`` (checkpoint reuse), ``launch`` (rank processes: spawned here or under
torchrun), ``case_verdict`` (the ranks' answers -> one ``CaseResult``, ok or failed).
"""
