"""The scaling program's pieces (``bench/scaling.py``, ``//bench:scaling``): save and load cost
as one axis grows with the others fixed, gcsckpt against stock DCP.

- ``fit``: the growth exponent of a cost along an axis (least squares in log-log).
- ``synthetic``: a 70B-shaped DCP ``Metadata`` and one rank's state dict at N simulated ranks.
- ``simulated``: one rank's planning and ``.metadata`` decode at N simulated ranks, no I/O.
- ``real``: saves and verified loads on this machine, items or bytes per rank growing.
- ``ranks``: the same save and load on 1..R real rank processes (``harness`` jobs).
- ``scaling_report``: the tables and the log-log PNG.
"""
