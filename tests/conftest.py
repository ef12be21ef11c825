"""Hypothesis profiles, chosen by the HYPOTHESIS_PROFILE environment variable.

- ``ci`` (default): quick, so ``make test`` stays fast on a 2-core machine; derandomized, so a CI
  failure reproduces locally with the same command.
- ``thorough`` (``make test-thorough``): many more examples and longer programs, random seeds.

Tests that need a fixed budget whatever the profile (the bug-zoo mutant hunts) pass their own
``settings`` explicitly.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings

# no_tlc, fake_jar, fake_tlc: one set of TLC stand-ins for the runner's and the command's tests.
pytest_plugins = ["tlc_fakes"]

# The embedded TLA+ checker caches parsed modules; the suite (and the commands it starts) keeps
# them in a folder of its own rather than in the user's ~/.cache.
if "TLACHECK_CACHE" not in os.environ:
    _tree_cache = tempfile.mkdtemp(prefix="tlacheck-trees-")
    os.environ["TLACHECK_CACHE"] = _tree_cache
    atexit.register(shutil.rmtree, _tree_cache, ignore_errors=True)

settings.register_profile(
    "ci",
    max_examples=200,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=1500,
    stateful_step_count=80,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
