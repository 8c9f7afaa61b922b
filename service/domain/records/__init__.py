"""Privacy records: the one place that builds what a released model says about its privacy
(fits and uploads in ``base``, aggregations and federated fits beside it)."""
