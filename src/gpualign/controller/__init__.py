"""Controller mode: watch the fleet in-cluster and raise the alarm the cluster never rings."""
