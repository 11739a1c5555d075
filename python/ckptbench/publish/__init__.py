"""Publishers of benchmark result rows, one per module.

``schema`` (the column list and row validation), ``row_files`` (results.json + results.csv),
``table`` (Markdown comparison), ``plot`` (PNG chart), ``bigquery`` (table create + insert) and
``run_report`` (all of them for one run). Import the submodule you need: matplotlib and
google-cloud-bigquery load only with their modules.
"""
