"""Load for the scheduler under test: shapes of nodes and pods, pod creation at a rate, held-back waves."""
