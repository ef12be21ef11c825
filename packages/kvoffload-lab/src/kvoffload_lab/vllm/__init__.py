"""The lab's vLLM checks: vLLM's offloading connectors and ours, in process and in live engines."""
