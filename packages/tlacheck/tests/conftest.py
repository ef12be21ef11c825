"""tlacheck's tests: the TLC stand-ins, a parse cache of the suite's own, and the hypothesis profiles.

- ``no_tlc``, ``fake_jar``, ``fake_tlc`` (``tlc_fakes``): TLC stand-ins for the runner's and the
  command line's tests.
- The embedded checker caches parsed modules; the suite (and the commands it starts) keeps them in
  a folder of its own rather than in the user's ~/.cache.
- ``HYPOTHESIS_PROFILE``: ``ci`` (default; quick and derandomized, so a failure reproduces with the
  same command) or ``thorough`` (many more examples, random seeds).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings

pytest_plugins = ["tlc_fakes"]

if "TLACHECK_CACHE" not in os.environ:
    _tree_cache = tempfile.mkdtemp(prefix="tlacheck-trees-")
    os.environ["TLACHECK_CACHE"] = _tree_cache
    atexit.register(shutil.rmtree, _tree_cache, ignore_errors=True)

# The same profiles as kvoffload's tests/conftest.py: the repository's whole suite loads both files,
# and the one loaded last must not change the other's settings.
settings.register_profile("ci", max_examples=200, stateful_step_count=30, deadline=None, derandomize=True,
                          database=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1500, stateful_step_count=80, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
