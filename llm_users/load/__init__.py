"""Load profiles and studies: open-loop arrivals, stages, the SLO sweep, trace replay, spawn spread.

``registry`` lists the profiles in order; each profile module says its options, checks them,
attaches to the run and writes its summary block and files. The pure parts (``arrivals``,
``pareto``, ``schedule_stats``) do no I/O.
"""
