"""Benchmark cases: ``catalogue`` (the Case record, its name, validation, the YAML catalogue) and
``selection`` (the cases one run takes: axes, name globs, world-size override, model scale).

Pure Python: importing these modules loads no torch.
"""
