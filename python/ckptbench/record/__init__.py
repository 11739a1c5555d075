"""What a benchmark run records.

``case_result`` (one case and reader: rounds, counters, verdict), ``host`` (machine and software
facts), ``resources`` (CPU and memory of the process tree), ``rss`` (one process's RSS peak),
``progress`` (live progress from the ranks), ``metrics`` (a CaseResult -> one flat result row; a
save's columns in ``save_columns``), ``columns`` (the column names several modules read),
``compare`` (ratios between rows: baseline, best peer, reference, ceiling).
"""
