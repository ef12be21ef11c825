"""vLLM's ``SimpleCPUOffloadConnector`` in live engines (``--connector simple``): :mod:`.judge` (its
registry row and judge: losses and leaks) and :mod:`.connector` (the connector, observed inside the
engine)."""
