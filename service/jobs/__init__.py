"""Job runners (DESIGN §1 ``jobs/``): where queued jobs execute, inline by default."""
