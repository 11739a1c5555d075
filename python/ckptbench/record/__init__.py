"""What a benchmark run records.

``case_result`` (one case and arm: ``CaseResult`` for a reader's loads, ``SaveResult`` for a
writer's saves; their outcome), ``rank_rounds`` (what each rank measured in a round: reader
counters, a writer's memory and phases, the round's stamps), ``host`` (machine and software
facts), ``resources`` (CPU and memory of the process tree), ``rss`` (one process's RSS peak),
``progress_display`` (live progress from the ranks), ``metrics`` (a CaseResult or SaveResult ->
one flat result row; a save's memory and phase columns in ``save_columns``), ``columns`` (the
column names several modules read, each scenario's rate columns), ``compare`` (ratios between
rows: baseline, best peer, reference, ceiling; each row's in its scenario's columns).
"""
