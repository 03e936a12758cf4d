"""The pieces of ``bench/client_overhead.py`` (its docstring is the bench's documentation; run
that script, not this package), one concern a module:

- ``config``: the paths, clients and start modes, a row's name, what the settings imply;
- ``simulator``: the llm-sim process the clients stream from;
- ``runs``: running the clients (one at a time, calm pairs, under py-spy) and reading them;
- ``analysis``: client records against the simulator's trace, the lag trace's figures;
- ``rules``: per-step rows, capacity, the targets, round by round;
- ``report``: the tables, the summary text, the profile's own/inclusive lists;
- ``cli``: the command line and the run from end to end.

The /proc readers are ``bench.lib.procfs``, shared with the other bench scripts."""
