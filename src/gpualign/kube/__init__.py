"""The cluster behind one door: the API client (reads over the standard library, writes over lightkube), kubeconfig,
watches, leases, and the node inventory."""
