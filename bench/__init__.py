"""The load generator's own benchmarks (docs/benchmarks.md). Each one is a script, run as
``python bench/NAME.py``; this is a package only so that they share ``bench/lib`` (what every
script uses) and ``bench/overhead`` (the pieces of ``bench/client_overhead.py``)."""
