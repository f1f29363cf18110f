"""What every room builds on: errors, the one YAML reader, the label and annotation names, the collector."""
