"""What must hold: the lifecycles as data and the named invariants (same names as tla/).

Public API: ``REQUEST_LIFECYCLE`` and ``JOB_LIFECYCLE`` (the offload protocol), ``TIER_LIFECYCLES``
(the secondary tiers' five: chunk residency, promotion, cascade, probe, request tier state),
``LIFECYCLES`` (every declaration by name: ``kvoffload diagram`` and ``kvoffload trace`` take any),
``INVARIANTS``, ``check_invariants`` and ``Violation``. Nothing here imports the code it judges.
"""

from kvoffload.lifecycles.invariants import INVARIANTS, Violation, check_invariants
from kvoffload.lifecycles.job import JOB_LIFECYCLE
from kvoffload.lifecycles.request import REQUEST_LIFECYCLE
from kvoffload.lifecycles.tier import TIER_LIFECYCLES
from kvoffload.statemachine.declaration import LifecycleDeclaration

LIFECYCLES: dict[str, LifecycleDeclaration] = {
    declaration.name: declaration for declaration in (REQUEST_LIFECYCLE, JOB_LIFECYCLE, *TIER_LIFECYCLES)
}

__all__ = [
    "INVARIANTS",
    "JOB_LIFECYCLE",
    "LIFECYCLES",
    "REQUEST_LIFECYCLE",
    "TIER_LIFECYCLES",
    "Violation",
    "check_invariants",
]
