"""The actions the checkers of vLLM's OffloadingConnector take, in the order the explorer tries them:
add a request, step the engine, abort a live request, reset the cache (with the connector)."""

from kvoffload_lab.vllm.common.connector_actions import ABORT, ADD, RESET, STEP

ACTIONS = (ADD, STEP, ABORT, RESET)
