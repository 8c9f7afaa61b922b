"""The runtime: where and how jobs run, and a node's outbound side (issue 27 §3).

``runner`` (the JobRunner protocol and the in-process pool) · ``queue_runner``
(``PRIVFIT_JOB_RUNNER=queue``: procrastinate, ``privfit worker``) · ``worker`` (JOB_HANDLERS:
what each job kind runs) · ``fairness`` (which queued job starts next) · ``node_agent``
(``privfit agent``) and ``node_link`` (a node's HTTP link to its coordinator).
"""
