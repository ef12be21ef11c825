"""Everything that checks the product: kvoffload's own code as the subject of its checkers.

- :mod:`kvoffload_lab.verify.explore_model`: the real scheduler + manager, an engine model and a
  worker model, as a model for the explorer (``OffloadExploreModel``).
- :mod:`kvoffload_lab.verify.bugzoo`: historical bugs reintroduced as mutants (``MUTANTS``,
  ``Mutant``, ``explore_model_for``).
- :mod:`kvoffload_lab.verify.mirror`: the spec's next-state relation replayed over recorded traces
  (``check_trace_file``, ``check_trace_lines``, ``TraceMirror``).
- :mod:`kvoffload_lab.verify.tiering`: the real scheduler + tiering manager as the explorer's model
  (``TierExploreModel``) and the tiering bugs as mutants (``TIER_MUTANTS``).

The product (``kvoffload.offload``, ``kvoffload.tiers``) never imports this package.
"""

from kvoffload_lab.verify.bugzoo import MUTANTS, Mutant, explore_model_for
from kvoffload_lab.verify.explore_model import OffloadExploreModel
from kvoffload_lab.verify.mirror import MalformedTrace, MirrorResult, TraceMirror, check_trace_file, check_trace_lines

__all__ = [
    "MUTANTS",
    "MalformedTrace",
    "MirrorResult",
    "Mutant",
    "OffloadExploreModel",
    "TraceMirror",
    "check_trace_file",
    "check_trace_lines",
    "explore_model_for",
]
