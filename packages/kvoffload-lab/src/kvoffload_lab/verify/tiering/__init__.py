"""The secondary tiers as the subject of the explorer: the real scheduler + tiering manager under
an engine, worker and tier model (``TierExploreModel``, ``kvoffload explore --tiers``) and the
tiering bugs as mutants (``TIER_MUTANTS``)."""

from kvoffload_lab.verify.tiering.explore_model import TierExploreModel
from kvoffload_lab.verify.tiering.mutants import TIER_MUTANTS, TierMutant

__all__ = ["TIER_MUTANTS", "TierExploreModel", "TierMutant"]
