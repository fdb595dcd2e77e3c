"""Pipelines and reports built on the fitted models."""
