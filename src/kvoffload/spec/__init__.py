"""What must hold: the request lifecycle as data and the named invariants (same names as tla/)."""

from kvoffload.spec.invariants import INVARIANTS, Violation, check_invariants
from kvoffload.spec.lifecycle import REQUEST_LIFECYCLE

__all__ = ["INVARIANTS", "REQUEST_LIFECYCLE", "Violation", "check_invariants"]
