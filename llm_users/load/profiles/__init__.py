"""The shipped load profiles, one module each (:mod:`.open_loop`, :mod:`.stages`, :mod:`.sweep`,
:mod:`.trace`); :mod:`llm_users.load.registry` lists them in order. Each module's top imports
only the configuration side; the machinery (schedulers, shapes, books) is imported when the
profile attaches to a run.
"""
