"""The traced engine: the plan and result, the copies of the model and optimizer it steps, the loops and the user's
step it runs, the tracker and the summary of its events."""
