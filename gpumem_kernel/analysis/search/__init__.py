"""The batch and sequence searches over the two engines, the evaluation batch, and the recommendations below the
maximum. The traced searches predict the stream at most sizes from a few traced ones (size_reuse) and trace the sizes
their answer rests on."""
