"""Loaders: gpualign's own data read from files into the model (the rules, the archive's last reading)."""
