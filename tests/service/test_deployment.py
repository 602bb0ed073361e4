"""health says where the agent's edits happen (Hermes' terminal backend), so that nobody
trusts checkpoints of a folder the agent never touches."""
from __future__ import annotations

import json

import pytest

from chronos_git.deployment import describe


@pytest.mark.parametrize("env,config,backend,edits,reach", [
    ({}, None, "local", True, True),
    ({"TERMINAL_ENV": "local"}, None, "local", True, True),
    ({"TERMINAL_ENV": "ssh", "TERMINAL_SSH_HOST": "box"}, None, "ssh", False, False),
    ({"TERMINAL_ENV": "modal"}, None, "modal", False, False),
    ({"TERMINAL_ENV": "daytona"}, None, "daytona", False, False),
    ({"TERMINAL_ENV": "docker"}, None, "docker", False, False),
    ({"TERMINAL_ENV": "docker", "TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE": "true"}, None, "docker", True, False),
    ({"TERMINAL_ENV": "singularity"}, None, "singularity", True, True),
    ({"TERMINAL_ENV": "hovercraft"}, None, "hovercraft", None, None),
    # config.yaml's terminal block wins over the environment, as in Hermes
    ({"TERMINAL_ENV": "local"}, {"terminal": {"backend": "ssh", "ssh_host": "h"}}, "ssh", False, False),
    ({"TERMINAL_ENV": "ssh"}, {"terminal": {"timeout": 5}}, "ssh", False, False),
    ({}, {"terminal": {"backend": "docker", "docker_mount_cwd_to_workspace": True}}, "docker", True, False),
    ({}, {"terminal": "nonsense"}, "local", True, True),
])
def test_the_backend_decides_where_edits_land(tmp_path, env, config, backend, edits, reach):
    d = describe(tmp_path / "store", environ=env, config=config)
    assert (d.backend, d.edits_here, d.store_in_reach) == (backend, edits, reach)
    assert d.summary


def test_a_docker_volume_over_the_store_puts_it_in_reach(tmp_path):
    store = tmp_path / "home" / ".hermes" / "plugin-data" / "chronos-git"
    for volumes, reach in [([f"{tmp_path / 'home'}:/root"], True), ([f"{store}:/s:ro"], True),
                           ([f"{store / 'objects'}:/o"], True), ([f"{tmp_path / 'elsewhere'}:/e"], False),
                           (["named-volume:/data"], False), ("not json", False)]:
        env = {"TERMINAL_ENV": "docker", "TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE": "1",
               "TERMINAL_DOCKER_VOLUMES": volumes if isinstance(volumes, str) else json.dumps(volumes)}
        d = describe(store, environ=env)
        assert d.store_in_reach is reach, volumes
        assert ("reach it" in d.summary) is reach


def test_remote_backends_say_plainly_what_is_not_protected(tmp_path):
    d = describe(tmp_path, environ={"TERMINAL_ENV": "ssh", "TERMINAL_SSH_HOST": "build-box"})
    assert "build-box" in d.summary and "cannot restore" in d.summary


def test_health_shows_the_deployment(cli, ws, tmp_path):
    home = tmp_path / "hermes"
    home.mkdir()
    (home / "config.yaml").write_text("terminal:\n  backend: ssh\n  ssh_host: build-box\n")
    h = cli("health", "--json", "-w", ws, env={"HERMES_HOME": str(home)}).json
    assert h["deployment"]["backend"] == "ssh" and h["deployment"]["edits_here"] is False
    text = cli("health", "-w", ws, env={"HERMES_HOME": str(home)}).stdout
    assert "build-box" in text and "cannot restore" in text
    local = cli("health", "--json", "-w", ws, env={"HERMES_HOME": str(tmp_path / "none")}).json
    assert local["deployment"]["backend"] == "local"
