"""The lab's state-machine tools: the explorer, its parallel run, replays and the TLA+ writers."""
