"""The benchmark program and its run loop.

``main`` (absl entry: list or run, exit code), ``flags`` (command-line flags -> ``RunConfig``),
``config`` (``RunConfig``), ``benchmark`` (the run: every case, the training phase, the
ceilings, publishing), ``case_run`` (one case: setup once, timed rounds per reader and writer,
sampled), ``ceilings`` (the endpoint's raw upload and download ceilings), ``notes`` (the rounds
note and the job-time table), ``storage`` (local endpoint, emulator or real bucket),
``bucket_type`` (the bucket type in case names), ``manifest`` (checkpoint reuse),
``case_verdict`` (the ranks' answers -> one ``CaseResult`` or ``SaveResult``, ok or failed).
Rank processes are started by ``harness.launch``.
"""
