"""A turn from the stored message to the stored reply: launching, lanes, stop control, budgets, evals, the planners."""
