"""The golemq-pg benchmark harness: golemq-pg side by side with its peers and the raw-SQL ceiling.

Run it with ``python -m benchmarks`` (or ``golemq-pg bench``); see ``benchmarks/RESULTS.md``
for the method and the latest full run.

The harness lives in the source checkout only: it is not installed with the package.
``golemq-pg bench`` finds it beside an editable install (``pip install -e '.[bench]'``) and
runs it in-process, from any directory; its default output paths are this folder's ``out/``
and ``benchmarks/RESULTS.md``.
"""
