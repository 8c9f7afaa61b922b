"""Datasets: a public spec plus a CSV or Parquet file → validated, encoded chunks, and the
use cases that store, list and delete them.

A new column type starts in ``spec`` (what the spec accepts) and the encoding pipeline.
"""
