"""What the real-Hermes end-to-end tests share."""
from __future__ import annotations

import pytest

from support.hermes_env import HermesEnv


@pytest.fixture
def henv(tmp_path):
    """A Hermes home with the plugin installed and the scripted model served (stopped after)."""
    env = HermesEnv(tmp_path).start()
    yield env
    env.stop()
