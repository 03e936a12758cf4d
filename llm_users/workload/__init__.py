"""Workloads: what each request sends. A :class:`~llm_users.workload.source.RequestSource`
hands out :class:`~llm_users.workload.source.WorkItem` s (messages, max output tokens, session
id and turn, target input length); datasets, synthetic exact-length prompts, shared prefixes and
multi-turn sessions are sources. Locust users and any scheduler draw from one (see
:func:`~llm_users.workload.build.source_for`).
"""
