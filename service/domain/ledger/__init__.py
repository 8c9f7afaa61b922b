"""The privacy ledger: exact ε/δ units and the all-or-nothing budget charges of every dataset."""
