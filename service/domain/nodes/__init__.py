"""Site nodes (issue 15): multiparty protocols where each site's rows stay on its own node.

Coordinator side: :mod:`.remote` (remote contributions of a study), :mod:`.exchange` (the
tasks waiting for nodes and their answers), :mod:`.remote_fit` (a federated fit whose parties
include nodes). Node side: :mod:`.offers` (offering a dataset to a coordinator's study) and
:mod:`.node_tasks` (accepting, checking and running the coordinator's tasks).
"""
