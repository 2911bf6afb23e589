"""What an analysis is asked: its options (AnalysisRequest), their checks, and the batches and sequence length a step
is fed."""
