"""The actions the checkers of ``KVOffloadConnector`` take, in the order the explorer tries them:
add a request, step the engine, abort a live request (between steps, or inside the next step), reset
the prefix cache with the connector (with or without ``reset_running_requests``), make the next
transfer fail."""

from kvoffload_lab.vllm.common.connector_actions import ABORT, ADD, FAIL_TRANSFER, RESET, STEP

ACTIONS = (ADD, STEP, ABORT, RESET, FAIL_TRANSFER)
