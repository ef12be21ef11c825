"""A small state-machine framework that knows nothing about KV caches.

Declarations (data) become one shared ``transitions`` machine plus a compiled transition table;
the runtime fires triggers on lightweight per-instance objects; traces, diagrams, the trace's
TLA+ module and the explorer all work from the same declaration. Public API:

- declaration: :class:`LifecycleDeclaration`, :class:`StateDecl`, :class:`TransitionDecl`,
  :class:`DeclarationError`;
- runtime: :class:`DeclaredMachine`, :class:`TransitionEvent`, :class:`LifecycleError`,
  :class:`IllegalTransition`, :class:`GuardRejected`;
- traces: :class:`TraceWriter` (``kvoffload.statemachine.trace``) and ``trace_tla``;
- diagrams: :func:`render` (mermaid or dot).

The explorer is imported from its own module (``explore``): importing the framework does not load
it.
"""

from kvoffload.statemachine.declaration import DeclarationError, LifecycleDeclaration, StateDecl, TransitionDecl
from kvoffload.statemachine.diagram import render
from kvoffload.statemachine.runtime import (
    DeclaredMachine,
    GuardRejected,
    IllegalTransition,
    LifecycleError,
    TransitionEvent,
)
from kvoffload.statemachine.trace import TraceWriter

__all__ = [
    "DeclarationError",
    "DeclaredMachine",
    "GuardRejected",
    "IllegalTransition",
    "LifecycleDeclaration",
    "LifecycleError",
    "StateDecl",
    "TraceWriter",
    "TransitionDecl",
    "TransitionEvent",
    "render",
]
