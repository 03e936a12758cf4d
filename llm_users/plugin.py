"""Wires locust-llm into Locust: options, the ``llm_response`` event, the auto-started
simulator, the settings and API-key checks, the preflight and the run's guards
(:mod:`llm_users.health.guard`), and the run (statistics, shipping, outputs).

Call :func:`register` once from a locustfile (the shipped ones do)::

    from locust import events
    from llm_users import plugin
    plugin.register(events)
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import gevent
from gevent.event import Event

from llm_users import events as llm_events
from llm_users import options as llm_options
from llm_users.errors import ConfigError
from llm_users.health import refusal
from llm_users.load import study, wiring
from llm_users.outputs.files import check_report_dir
from llm_users.run import MasterRun, MergingRun, role_for, run_for
from llm_users.settings import overridden

log = logging.getLogger(__name__)

_registered: set[int] = set()


def register(events: Any = None) -> None:
    """Add the ``--llm-*`` options, the ``llm_response`` event and the run listeners (once)."""
    events = llm_events.first_time(events, _registered)
    if events is None:
        return
    _release_sdk_names()
    llm_events.install(events)
    events.init_command_line_parser.add_listener(llm_options.add_arguments)
    events.init_command_line_parser.add_listener(study.add_arguments)
    events.init_command_line_parser.add_listener(refusal.on_parser)  # Locust's own start errors: one line
    events.init.add_listener(_on_init)


def _release_sdk_names() -> None:
    """Locust imports a locustfile under its file's name, so ``locustfiles/openai.py`` becomes
    the module ``openai`` and a later ``import openai`` would get the locustfile, not the SDK.
    Take such a plain module out of ``sys.modules`` under an SDK's name (Locust keeps its own
    reference to the module; nothing looks it up by that name), so the SDK imports as usual."""
    from llm_users.protocols.backend import all_backends

    names = {r.sdk.module.split(".")[0] for b in all_backends().values() for r in b.routes if r.sdk}
    for name in names:
        mod = sys.modules.get(name)
        if mod is not None and not hasattr(mod, "__path__"):  # a file, where the SDK is a package
            del sys.modules[name]


def _fail(message: str) -> None:
    """Stop at start with one clear line (an exception in a listener would only be logged), and no
    forked worker (--processes) left behind (health/refusal.py)."""
    refusal.refuse(message)


def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    started_early = _watch_test_start(environment)  # see _replay_missed_test_start
    refusal.guard_web_ui(getattr(environment, "web_ui", None))  # its port in use: one line, not a traceback
    llm_events.install(environment.events)
    user_classes = list(environment.user_classes or [])
    try:
        config = llm_options.config_for(environment)
        _check_settings(config)
        from llm_users.workload.build import check as check_workload

        for cls in config.user_settings:
            try:
                check_workload(config.workload_for(cls), getattr(cls, "descriptor", None),  # a malformed dataset
                               config.settings(cls).endpoint)  # or images to a route without them fail here, at start
            except ConfigError as e:  # "dataset FILE, line N: ..." names the option's value already
                named = "--llm-" in str(e) or str(e).startswith("dataset")
                raise ConfigError(str(e) if named else f"--llm-dataset/--llm-prompts: {e}") from None
        if role_for(runner).merges:  # the process that talks to the server's host and writes the report
            _check_hosts(environment, user_classes, config)
            if config.report_dir:
                check_report_dir(config.report_dir)
        llm_options.install(environment, config)  # read again at each test start, before the study sees it
        if role_for(runner).merges:
            for line in overridden(config.options):
                print(f"locust-llm: note: {line}", flush=True)
        run = run_for(environment, config, runner)
        if isinstance(run, MasterRun):  # summary.json's workers.merge: the merge's lag and CPU
            run.summary_hooks.append(run.collector.add_merge_state)
        from llm_users.workload.summary import attach as attach_workload

        attach_workload(environment, run)

        # open loop, stages, sweep, trace replay; at each test start the study reads the configuration
        # options.install re-read (its listener runs first: the web form, a worker's options)
        run.study = wiring.attach(environment, run, run.config.study, lambda: run.current_config.study)
        from llm_users.outputs.cost import attach as attach_cost

        attach_cost(environment, run)
        from llm_users.metrics.outages import attach as attach_outages

        attach_outages(environment, run)  # summary.json's outages (server down and back)
        from llm_users.metrics.breakdown import attach as attach_breakdown

        attach_breakdown(environment, run)  # summary.json's overall.breakdown (the server's own timings)
        from llm_users.load.ramp import attach as attach_ramp

        attach_ramp(environment, run)  # window.users, --llm-warmup ramp: before run.install's own listeners
        from llm_users.load.warmup import attach as attach_warmup

        attach_warmup(environment, run)  # one warm-up for the run, as applied; window.warmup's counts
        if isinstance(run, MergingRun):  # extensions attach here (e.g. exporters.register)
            environment.events.llm_run_ready.fire(environment=environment, run=run)
        from llm_users.outputs.environment import attach as attach_environment

        attach_environment(environment, run)  # after the extensions: it reads the sections they add (GPU)
    except ConfigError as e:
        _fail(str(e))
    environment.llm_run = run
    if isinstance(run, MergingRun):
        if run.config.headless:  # Locust prints its final table at exit: ours comes after it
            from llm_users.outputs.console import hold_until_quit

            hold_until_quit(environment.events)
        from llm_users.outputs.console import watch_resets

        watch_resets(environment, run)  # Locust's table reset mid-test: its count is not the test's
        if getattr(environment, "web_ui", None) is not None:
            from llm_users.webui import guard
            from llm_users.webui.tab import install as install_tab

            guard.install(environment.web_ui, run)  # first: its rules run before any route's
            install_tab(environment.web_ui, run)
        if not environment.host and not all(getattr(u, "host", None) for u in user_classes):
            if isinstance(run, MasterRun):  # workers get the host from the master when the test starts
                _fail("distributed mode needs a server: give --host (the auto-started simulator is for "
                      "single-process runs; start one with `llm-sim --host 0.0.0.0 --port 8000`)")
            _start_simulator(environment, run)
    _preflight(environment, run)
    from llm_users.client.model_probe import discovered_models
    from llm_users.health import guard

    guard.attach_before(environment, run, discovered_models())  # a worker's preflight, as its test starts
    run.install(runner)
    guard.attach(environment, run)  # fail-stop, nothing measured
    from llm_users.health.console_table import install as install_console_table

    install_console_table()  # Locust's table every 2 s, in pieces between the streams' reads
    # Locust arms its -t timer right after this event, before the event loop has run: libev
    # times it from the loop's cached "now", stale by all the start-up work (imports, the SDK,
    # the settings checks), and a 4 s run ended after 1.7 s. Bring the clock up to date.
    gevent.get_hub().loop.update_now()
    _route_signals_to_main(environment, run.config.headless)
    _replay_missed_test_start(environment, started_early)


def _watch_test_start(environment: Any) -> Any:
    """A sentinel ``test_start`` listener for the start-up: it notes how many listeners there were
    when Locust fired the event, i.e. which of ours it reached. Fired from another greenlet (a
    worker's message loop, while start-up yields), it holds that greenlet until start-up is done:
    Locust spawns the users right after the event, and users made before the missed listeners ran
    would take this process's own options instead of the master's (``--llm-client``, max tokens)."""
    init = gevent.getcurrent()
    done = Event()

    def sentinel(**_: Any) -> None:
        sentinel.reached = len(environment.events.test_start._handlers)  # type: ignore[attr-defined]
        if gevent.getcurrent() is not init:
            done.wait()

    sentinel.reached = None  # type: ignore[attr-defined]
    sentinel.done = done  # type: ignore[attr-defined]
    environment.events.test_start.add_listener(sentinel)
    return sentinel


def _replay_missed_test_start(environment: Any, sentinel: Any) -> None:
    """A worker (``--processes`` forks them) is connected to its master while ``init`` still runs;
    when something in this start-up yields to the event loop, the master's spawn can be handled
    first and Locust fires ``test_start`` before all our listeners exist. The run then never
    started: it shipped nothing and ignored the master's stop, and its records came only at
    quit. Run the listeners added after that moment, once. (EventHook keeps its listeners in
    ``_handlers`` and copies them when it fires; Locust has no public accessor.)"""
    hook = environment.events.test_start
    missed = list(hook._handlers[sentinel.reached:]) if sentinel.reached is not None else []
    hook.remove_listener(sentinel)
    if missed:
        log.info("locust-llm: the test started while this process was still starting up; starting its run now")
        for handler in missed:
            handler(environment=environment)
    sentinel.done.set()  # the spawn held by the sentinel goes on, with the settings refreshed


def _route_signals_to_main(environment: Any, headless: bool) -> None:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt in whatever Python code runs at that moment: in a
    busy process that is often a user's greenlet, which then dies with a traceback while Locust's
    main greenlet never hears of it (a worker then looked lost). Deliver it to the main greenlet,
    where Locust waits for it and starts its orderly shutdown.

    SIGTERM (Kubernetes' stop) during a headless run with a load shape (``--llm-stages``,
    ``--llm-steps``, sweeps) is delivered the same way. Locust installs its own SIGTERM handler
    only after its headless start-up returns, and with a shape that start-up is the whole run
    (it joins the shape's greenlet): the signal's default action killed the process, no summary,
    no report (tests/e2e/test_signals.py). Once the shape is done, Locust's handler is there and
    this one does nothing."""
    import signal
    import threading

    from locust.runners import STATE_INIT, STATE_RUNNING, STATE_SPAWNING, WorkerRunner

    if threading.current_thread() is not threading.main_thread():
        return
    hub = gevent.get_hub()

    def to_main() -> None:
        hub.parent.throw(KeyboardInterrupt())

    gevent.signal_handler(signal.SIGINT, to_main)
    if environment.shape_class is None or not headless or isinstance(environment.runner, WorkerRunner):
        return

    def shape_running_to_main() -> None:
        runner = environment.runner
        if runner is not None and runner.state in (STATE_INIT, STATE_SPAWNING, STATE_RUNNING):
            log.info("locust-llm: SIGTERM: stopping the test as Ctrl-C does")
            to_main()

    gevent.signal_handler(signal.SIGTERM, shape_running_to_main)


def _preflight(environment: Any, run: Any) -> None:
    """The local runner's preflight, before Locust starts the test (health/guard.py says where
    the other roles run theirs): a fatal finding is one line and exit 1, no load sent."""
    if run.merges and run.generates_load and (environment.host or any(
            getattr(c, "host", None) for c in run.config.user_settings)):
        from llm_users.client.model_probe import discovered_models
        from llm_users.health.guard import preflight_at_start

        fatal = preflight_at_start(environment, run, discovered_models())
        if fatal is not None:
            run.close()  # the auto-started simulator, if any
            _fail(fatal.message)


def _check_hosts(environment: Any, user_classes: list[Any], config: llm_options.RunConfig) -> None:
    """--host (and any User class's own host) is an http(s) URL, checked before any request; an
    empty one (``--host ""``, ``LOCUST_HOST=``: an unset variable, most likely) is no request to
    run against the embedded simulator, which only a missing --host starts."""
    if (config.options or {}).get("host") == "":
        raise ConfigError("--host is empty (given without a value, or LOCUST_HOST set to nothing): give the "
                          "server's URL, e.g. --host http://localhost:8000, or leave --host out to run against "
                          "the embedded simulator")
    if environment.host:
        llm_options.check_url(environment.host, "--host")
    for cls in user_classes:
        if getattr(cls, "host", None):
            llm_options.check_url(cls.host, f"{cls.__name__}.host")


def _check_settings(config: llm_options.RunConfig) -> None:
    """Settings, prompts and API keys are checked before any user starts."""
    for cls, settings in config.user_settings.items():
        if settings.client == "sdk":
            from llm_users.client.sdk import check_sdk_available, quiet_http_logs

            check_sdk_available(cls, settings.endpoint)  # imported now, not inside the first request
            quiet_http_logs()  # no "HTTP Request: POST ..." line per request
        if cls.requires_api_key and not settings.api_key():
            raise ConfigError(
                f"{cls.__name__} needs an API key in the environment variable {settings.api_key_names()} "
                f"(set it, or name another variable with --llm-api-key-env)"
            )


def _sim_routes(user_classes: list[Any]) -> tuple[list[str], list[str]]:
    """``--routes`` for the run's backends declared outside the package (their descriptors'
    ``sim_routes``), and where the child finds them: the directories of the locustfiles naming
    them (Locust drops a locustfile's directory from the import path once the file is loaded)."""
    import os

    from llm_users.protocols.backend import extra_sim_routes

    own = [cls for cls in user_classes if getattr(cls, "descriptor", None) is not None]
    routes = extra_sim_routes(cls.descriptor for cls in own)
    if not routes:
        return [], []
    files = [getattr(sys.modules.get(cls.__module__), "__file__", None) for cls in own]
    dirs = [os.path.dirname(os.path.abspath(f)) for f in files if f]
    return ["--routes", ",".join(routes)], list(dict.fromkeys(dirs))


def _start_simulator(environment: Any, run: MergingRun) -> None:
    from llm_users.sim.launcher import start_simulator

    extra = run.config.sim_args
    routes, pythonpath = _sim_routes(list(environment.user_classes or []))
    try:
        sim = start_simulator([*run.config.sim_argv, *routes], pythonpath=pythonpath)
    except RuntimeError as e:
        _fail(f"could not start the embedded simulator: {e}")
    run.simulator = sim
    environment.host = sim.url
    run.config = llm_options.add_start_host(environment, run.config, sim.url)  # the key may go there too
    args = f" {run.redactor.text(extra)}" if extra else ""
    print(f"locust-llm: no --host given: started the embedded simulator (llm-sim{args}) at {sim.url}", flush=True)
