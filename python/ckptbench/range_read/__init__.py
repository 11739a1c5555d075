"""The range-read micro-benchmark (``bazel run //bench:range_read``).

``bench`` (the method and the run), ``ranges`` (range sets and size labels), ``clients`` (the
clients compared), ``range_rows`` (result rows, ratios; printed and written through
``publish``).
"""
