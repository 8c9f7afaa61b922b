"""Job runners (docs/design.md §1 ``jobs/``): where queued jobs execute, inline by default."""
