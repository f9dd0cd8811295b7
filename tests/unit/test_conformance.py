"""The shipped store conformance suite stays an extra: without pytest, importing it says
which one to install, in one line."""

from __future__ import annotations

import subprocess
import sys

WITHOUT_PYTEST = """
import sys
sys.modules["pytest"] = None  # as if txqueue[testing] were not installed
import txqueue.testing.conformance
"""


def test_without_pytest_the_suite_names_the_extra_to_install() -> None:
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYTEST], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "txqueue.errors.ConfigError: txqueue.testing.conformance needs pytest: "
        "pip install 'txqueue[testing]'"
    )


def test_txqueue_and_its_testing_helpers_import_without_pytest() -> None:
    code = 'import sys\nsys.modules["pytest"] = None\nimport txqueue, txqueue.testing'
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
