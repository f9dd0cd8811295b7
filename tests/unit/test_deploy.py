"""The deployment files parse, and every txqueue command in them is one the CLI accepts."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.main import get_command

from txqueue.cli.app import app, load_registry

ROOT = Path(__file__).resolve().parents[2]


def accepts(argv: list[str]) -> str:
    """Parse ``txqueue <argv>`` as the CLI would, without running it; returns the command."""
    assert argv[0].endswith("txqueue"), argv
    group: Any = get_command(app)
    name, *args = argv[1:]
    command = group.get_command(typer.Context(group), name)
    assert command is not None, f"no command {name!r}"
    while hasattr(command, "get_command") and args and not args[0].startswith("-"):
        sub, *args = args  # a command of a group: txqueue queue show
        command = command.get_command(typer.Context(command), sub)
        assert command is not None, f"no command {name} {sub!r}"
    command.make_context(name, args)  # raises on an unknown flag or a bad value
    if "--app" in args:
        load_registry(args[args.index("--app") + 1])
    return name


def unit(path: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((ROOT / path).read_text())
    return parser


def yaml_file(path: str) -> Any:
    return yaml.safe_load((ROOT / path).read_text())


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # --app modules are imported from the working directory


def test_crontab_runs_one_cleaner_pass_every_minute() -> None:
    lines = [
        line
        for line in (ROOT / "cleaner/crontab").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    env = [line for line in lines if "=" in line.split()[0]]
    [job] = [line for line in lines if line not in env]
    fields = job.split(None, 5)
    assert fields[:5] == ["*"] * 5
    argv = shlex.split(fields[5].split(">>")[0].split("&&")[-1])
    assert accepts(argv) == "cleaner" and "--once" in argv and "--app" in argv
    assert {line.split("=")[0] for line in env} == {"TXQUEUE_DATABASE_URL", "TXQUEUE_AMQP_URL"}


def test_systemd_units() -> None:
    service = unit("cleaner/txqueue-cleaner.service")
    assert service["Service"]["Type"] == "oneshot"
    argv = shlex.split(service["Service"]["ExecStart"])
    assert accepts(argv) == "cleaner" and "--once" in argv and "--app" in argv
    assert service["Service"]["WorkingDirectory"]  # where --app is imported from
    timer = unit("cleaner/txqueue-cleaner.timer")
    assert timer["Timer"]["OnUnitActiveSec"] == "1min"

    worker = unit("workers/txqueue-worker.service")
    assert accepts(shlex.split(worker["Service"]["ExecStart"])) == "worker"
    # systemd must wait longer than the worker's own shutdown timeout before SIGKILL.
    argv = shlex.split(worker["Service"]["ExecStart"])
    shutdown = float(argv[argv.index("--shutdown-timeout") + 1])
    assert float(worker["Service"]["TimeoutStopSec"]) > shutdown
    assert worker["Service"]["KillSignal"] == "SIGTERM"


def test_kubernetes_manifests() -> None:
    cronjob = yaml_file("cleaner/cronjob.yaml")
    assert cronjob["kind"] == "CronJob" and cronjob["spec"]["schedule"] == "* * * * *"
    [container] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    argv = container["command"]
    assert accepts(argv) == "cleaner" and "--once" in argv and "--app" in argv

    deployment = yaml_file("workers/deployment.yaml")
    assert deployment["kind"] == "Deployment"
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    argv = container["command"]
    assert accepts(argv) == "worker"
    shutdown = float(argv[argv.index("--shutdown-timeout") + 1])
    assert pod["terminationGracePeriodSeconds"] > shutdown
    # The liveness probe and the scrape annotations point at the port the worker serves.
    port = int(argv[argv.index("--metrics-port") + 1])
    [named] = [p for p in container["ports"] if p["name"] == "metrics"]
    assert named["containerPort"] == port
    probe = container["livenessProbe"]["httpGet"]
    assert probe == {"path": "/healthz", "port": "metrics"}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics"
    assert "'.[metrics]'" in (ROOT / "workers/Dockerfile").read_text()

    scaled = yaml_file("workers/keda.yaml")
    assert scaled["kind"] == "ScaledObject"
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    # The Deployment's environment has the variable KEDA reads the connection from.
    assert trigger["metadata"]["connectionFromEnv"] == "TXQUEUE_DATABASE_URL"
    assert container["envFrom"] == [{"secretRef": {"name": "txqueue"}}]


def test_docker_compose() -> None:
    compose = yaml_file("docker-compose.yml")
    services = compose["services"]
    for name in ("postgres", "rabbitmq"):
        assert services[name]["healthcheck"]["test"], name
    assert accepts(services["init"]["command"]) == "init"
    argv = services["worker"]["command"]
    assert accepts(argv) == "worker"
    shutdown = float(argv[argv.index("--shutdown-timeout") + 1])
    assert float(services["worker"]["stop_grace_period"].rstrip("s")) > shutdown
    assert accepts(services["cleaner"]["command"]) == "cleaner"
    assert {"--loop", "--app"} <= set(services["cleaner"]["command"])
    for name in ("worker", "cleaner"):
        needs = services[name]["depends_on"]
        assert needs["postgres"]["condition"] == "service_healthy"
        assert needs["init"]["condition"] == "service_completed_successfully"
    dockerfile = services["worker"]["build"]["dockerfile"]
    assert (ROOT / dockerfile).is_file()


def test_a_wrong_flag_is_caught() -> None:
    with pytest.raises(Exception, match="No such option: --every"):
        accepts(["txqueue", "cleaner", "--every", "5"])
    with pytest.raises(Exception, match="valid integer"):
        accepts(["txqueue", "worker", "--app", "x:y", "--concurrency", "many"])
    with pytest.raises(AssertionError, match="no command 'clean'"):
        accepts(["txqueue", "clean", "--once"])
