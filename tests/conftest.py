"""Test-wide settings.

Hypothesis runs derandomized by default, so CI on a clean clone sees the same examples every time
and a red run is reproducible. Set HYPOTHESIS_PROFILE=explore to draw fresh examples (what found
the torchtitan EP-with-DDP refusal).
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
