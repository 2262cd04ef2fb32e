"""The golemq-pg benchmark harness: golemq-pg side by side with its peers and the raw-SQL ceiling.

Run it with ``python -m benchmarks`` (or ``golemq-pg bench``); see ``benchmarks/RESULTS.md``
for the method and the latest full run.
"""
