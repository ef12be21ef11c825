"""What every vLLM connector's check shares, naming no connector: the findings (:mod:`.findings`),
the shared actions (:mod:`.connector_actions`), the hypothesis machine (:mod:`.search`), the explorer
over actions (:mod:`.action_explore`), the seeded run (:mod:`.seeded`), the runner of checker cells
(:mod:`.runner`), locating a vLLM (:mod:`.locate`), the in-process engine (:mod:`.engine`) and the
live check's driver, workloads and verdicts (:mod:`.live`). It imports no connector's folder."""
