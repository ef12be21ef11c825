"""A small state-machine framework that knows nothing about KV caches.

Declarations (data) become one shared ``transitions`` machine plus a compiled transition table;
the runtime fires triggers on lightweight per-instance objects; the explorer, the TLA+ checkers,
traces and diagrams all work from the same declaration.
"""
