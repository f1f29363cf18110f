"""Versioned data files: OS-tag rules, NVIDIA's published precompiled matrix, and the CUDA→driver table."""
