"""One model from several sites' released models: the registry of charged multi-site methods
(methods), averaging and feature aggregation (aggregation), hypothesis transfer (transfer).
Protocols over the sites' rows live in service.dp.federated."""
