"""One model from several sites' released models: the registry of charged multi-site methods
(methods), averaging and feature aggregation (aggregation), hypothesis transfer (transfer) and
PST-H, its form with feature groups (stacked_transfer). Protocols over the sites' rows live in
service.dp.federated."""
