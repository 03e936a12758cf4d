"""Issue 26, acceptance: a load profile of one's own and an output of one's own are one module
each, written to a temporary directory (nothing in llm_users edited), registered from the
locustfile through the registries' public ``register``, and a real ``locust -f`` run (headless,
simulator auto-started) shows the profile's option parsed and checked, its summary block, its
console line and its file, and the output's file with a value from the final data."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import read_records, read_summary, run_locust

pytestmark = pytest.mark.slow

TOY_PROFILE = '''
"""A toy load profile: ``--llm-toy-burst N``; it watches the merged records, adds the
``toy_profile`` summary block and a console line, and writes toy.csv at the stop."""

from llm_users.errors import ConfigError
from llm_users.load.profile import LoadProfile, ProfileRun, given


class ToyRun(ProfileRun):
    def __init__(self, study, burst):
        self.burst, self.seen, self.starts = burst, 0, 0
        self.role = "master" if study.on_master else "local"
        study.run.collector.observers.append(self.see)

    def see(self, record):
        self.seen += 1

    def on_test_start(self, fresh):
        self.starts += 1
        assert fresh.part("toy_profile") == self.burst  # read again at the test's start

    def summary(self, s):
        s["toy_profile"] = {"burst": self.burst, "records_seen": self.seen, "test_starts": self.starts,
                            "role": self.role}


class ToyProfile(LoadProfile):
    name = "toy_profile"

    def add_arguments(self, opt):
        opt("--llm-toy-burst", "toy profile: N, a whole number >= 1")

    def parse(self, opts):
        value = given(opts, "llm_toy_burst")
        if value is None:
            return None
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise ConfigError(f"--llm-toy-burst must be a whole number >= 1, got {value!r}")
        return n

    def attach(self, study, config):
        if config is None or study.on_worker:  # it watches the merged records
            return None
        return ToyRun(study, config)

    def console_lines(self, summary):
        toy = summary.get("toy_profile")
        return [f"toy profile: burst {toy['burst']}, {toy['records_seen']} records seen"] if toy else []

    def files(self, summary):
        toy = summary.get("toy_profile")
        if not toy:
            return {}
        return {"toy.csv": f"burst,records_seen\\n{toy['burst']},{toy['records_seen']}\\n"}
'''

TOY_OUTPUT = '''
"""A toy output: toy_output.txt with the measured request count of the final data."""

from pathlib import Path


class ToyOutput:
    name = "toy_output"

    def write(self, final, directory):
        if directory:
            Path(directory, "toy_output.txt").write_text(f"requests {final.summary['overall']['requests']}\\n")
'''

LOCUSTFILE = '''
from locust import events

from llm_users import plugin
from llm_users.load import registry as load_profiles
from llm_users.outputs import registry as outputs
from llm_users.users import VLLMUser

from toy_output import ToyOutput
from toy_profile import ToyProfile

load_profiles.register(ToyProfile)
outputs.register(ToyOutput())
plugin.register(events)


class VLLM(VLLMUser):
    pass
'''

SIM = "--ttft-ms 5 --itl-ms 1 --output-tokens 4 --seed 1"


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("toys")
    (d / "toy_profile.py").write_text(textwrap.dedent(TOY_PROFILE))
    (d / "toy_output.py").write_text(textwrap.dedent(TOY_OUTPUT))
    (d / "locustfile.py").write_text(textwrap.dedent(LOCUSTFILE))
    return d


@pytest.fixture(scope="module")
def toy_run(toy_dir: Path) -> tuple[Path, str]:
    report = toy_dir / "report"
    proc = run_locust(str(toy_dir / "locustfile.py"), "-u", "2", "-r", "2", "-t", "3s", "--stop-timeout", "5",
                      "--llm-toy-burst", "3", "--llm-sim-args", SIM, "--llm-prometheus-port", "0", report=report)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return report, proc.stdout


def test_a_toy_load_profile_in_one_module(toy_run: tuple[Path, str]) -> None:
    report, stdout = toy_run
    s = read_summary(report)
    toy = s["toy_profile"]
    assert toy["burst"] == 3 and toy["test_starts"] == 1 and toy["role"] == "local"
    assert toy["records_seen"] == s["records"] == len(read_records(report)) > 0  # attached to the merged records
    assert s["config"]["llm_toy_burst"] == "3"  # an option like the others
    assert (report / "toy.csv").read_text() == f"burst,records_seen\n3,{toy['records_seen']}\n"
    assert f"toy profile: burst 3, {toy['records_seen']} records seen" in stdout
    assert not (report / "stages.csv").exists()  # the shipped profiles' files only when asked for


def test_a_toy_output_in_one_module(toy_run: tuple[Path, str]) -> None:
    report, stdout = toy_run
    s = read_summary(report)
    assert s["overall"]["requests"] > 0
    assert (report / "toy_output.txt").read_text() == f"requests {s['overall']['requests']}\n"
    assert stdout.rstrip().endswith(f"locust-llm: report written to {report}/")  # written before that line


def test_the_toy_option_is_checked_at_start(toy_dir: Path, tmp_path: Path) -> None:
    proc = run_locust(str(toy_dir / "locustfile.py"), "-t", "2s", "--llm-toy-burst", "0", report=tmp_path / "r")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "locust-llm: --llm-toy-burst must be a whole number >= 1, got '0'"
    assert not (tmp_path / "r" / "summary.json").exists()
