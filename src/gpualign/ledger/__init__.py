"""The image ledger: which driver image tags the team has. Files and live OCI registries, merged."""
