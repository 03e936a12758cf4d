"""load/wiring.py: every registered profile attached to one node's run in the registry's order, what
attaches on which role, and the LLM User classes an open-loop arrival is sent through (the
locustfile's, read when asked)."""

from __future__ import annotations

from argparse import Namespace

from locust import HttpUser, User
from locust.env import Environment

from llm_users.load import wiring
from llm_users.load.profiles.cache_reset import CacheResetProfile
from llm_users.load.profiles.open_loop import OpenLoop
from llm_users.load.profiles.stages import Stages
from llm_users.load.registry import parse_options
from llm_users.users import VLLMUser
from tests.load.study_rig import Runner, run_of


class Chat(VLLMUser):
    abstract = True


class Plain(User):
    abstract = True


class Web(HttpUser):
    abstract = True


def test_only_the_llm_user_classes_are_sent_through() -> None:
    env = Environment(user_classes=[Plain, Chat, Web])
    assert wiring.llm_user_classes(env) == [Chat]
    env.user_classes = None
    assert wiring.llm_user_classes(env) == []


def test_every_profile_attaches_in_the_registrys_order() -> None:
    env = Environment(user_classes=[Plain])
    env.runner = Runner()
    study = wiring.attach(env, run_of("local"), parse_options(Namespace(llm_steps="1:2:1:5s")))
    assert list(study.runs) == [OpenLoop, Stages, CacheResetProfile]
    assert env.shape_class is study.get(Stages).shape  # the stages' shape drives the run
    assert study.user_classes() == []
    env.user_classes = [Chat, Plain]  # the web UI may change the classes: read when an arrival is sent
    assert study.user_classes() == [Chat]


def test_a_worker_attaches_only_the_arrival_engine() -> None:
    env = Environment(user_classes=[])
    env.runner = Runner()
    study = wiring.attach(env, run_of("worker"), parse_options(Namespace(llm_steps="1:2:1:5s")))
    assert list(study.runs) == [OpenLoop] and env.shape_class is None  # the master's shape drives the workers
    assert list(env.runner.handlers) == ["llm_rate"]  # its share comes from the master


def test_the_configuration_is_read_again_through_fresh() -> None:
    env = Environment(user_classes=[])
    env.runner = Runner()
    reads: list[int] = []

    def fresh():
        reads.append(1)
        return parse_options(Namespace(llm_rate="3"))

    study = wiring.attach(env, run_of("local"), parse_options(Namespace()), fresh)
    env.events.test_start.fire(environment=env)
    try:
        assert reads == [1] and study.get(OpenLoop).rate == 3.0  # the web form's rate taken at the start
    finally:
        env.events.test_stopping.fire(environment=env)  # its scheduler stops before it sends
