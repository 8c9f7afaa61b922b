"""Stored models: reading, exporting, predicting and private evaluation."""
