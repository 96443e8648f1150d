"""Hypothesis profiles of the hardening tests, and the examples per run they imply.

``ci`` (the default) keeps the suite quick; ``slow`` (``HYPOTHESIS_PROFILE=slow``) runs many more
examples, for the GPU machine. No deadline: the first call of a kernel compiles it.
"""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, settings

# Hypothesis keeps caches in ./.hypothesis unless told otherwise: never in the working tree.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", tempfile.mkdtemp(prefix="ignis-hypothesis-"))

# The device fixture is function-scoped but only names a device: sharing it across examples is
# what the tests mean.
_SUPPRESS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]
# No example database: it would be a folder in the working tree; a failure prints the blob
# that reproduces it (@reproduce_failure) instead.
_COMMON = dict(deadline=None, suppress_health_check=_SUPPRESS, database=None, print_blob=True)
settings.register_profile("ci", max_examples=100, **_COMMON)
settings.register_profile("slow", max_examples=1000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
