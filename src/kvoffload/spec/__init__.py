"""What must hold: the lifecycles as data and the named invariants (same names as tla/).

Public API: ``REQUEST_LIFECYCLE`` and ``JOB_LIFECYCLE`` (``LIFECYCLES`` by name), ``INVARIANTS``,
``check_invariants`` and ``Violation``. Nothing here imports the code it judges.
"""

from kvoffload.spec.invariants import INVARIANTS, Violation, check_invariants
from kvoffload.spec.job_lifecycle import JOB_LIFECYCLE
from kvoffload.spec.lifecycle import REQUEST_LIFECYCLE
from kvoffload.statemachine.declaration import LifecycleDeclaration

LIFECYCLES: dict[str, LifecycleDeclaration] = {
    declaration.name: declaration for declaration in (REQUEST_LIFECYCLE, JOB_LIFECYCLE)
}

__all__ = ["INVARIANTS", "JOB_LIFECYCLE", "LIFECYCLES", "REQUEST_LIFECYCLE", "Violation", "check_invariants"]
