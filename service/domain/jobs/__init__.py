"""Jobs: the state machine (claim, progress, cancel, recovery, the release guard) and the one
contract every charged job is submitted through (``charged.submit_charged_job``).

A new job runner implements ``service.runtime.runner.JobRunner``; nothing here changes.
"""
