"""The batch and sequence searches over the two engines, the evaluation batch, and the recommendations below the
maximum."""
