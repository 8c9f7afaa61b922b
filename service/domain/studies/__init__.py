"""Multi-site studies: membership and grants, charged aggregations and federated fits."""
